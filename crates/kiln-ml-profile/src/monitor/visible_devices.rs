//! Which NVML device a CUDA device is: CUDA numbers the devices `CUDA_VISIBLE_DEVICES` leaves
//! visible, in its order, from 0; NVML numbers every GPU of the machine. Parsed as the CUDA
//! runtime does, and as PyTorch's `torch.cuda._get_nvml_device_index` maps it: a list of
//! device numbers (`"2,3"`, read like `strtoul`, so `"1gpu2"` is 1) or of GPU UUIDs and unique
//! prefixes of them (`"GPU-5f2c"`); the list stops at its first entry that is neither, and a
//! device named twice hides every device.
//!
//! Device numbers are CUDA's, and CUDA orders devices fastest first unless
//! `CUDA_DEVICE_ORDER=PCI_BUS_ID`, while NVML orders them by PCI bus: on a machine of identical
//! GPUs the two agree (ties go by bus). With mixed models, set `CUDA_DEVICE_ORDER=PCI_BUS_ID`
//! or name the GPUs by UUID.

/// The variable CUDA reads.
pub(crate) const VARIABLE: &str = "CUDA_VISIBLE_DEVICES";

/// What `CUDA_VISIBLE_DEVICES` says, in CUDA's order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Visible {
    /// Unset: every device, CUDA's numbers being NVML's.
    All,
    /// Device numbers.
    Numbers(Vec<u32>),
    /// UUIDs (`GPU-…`), whole or a unique prefix.
    Uuids(Vec<String>),
    /// MIG instances (`MIG-…`): not NVML devices, so not mapped.
    Mig,
}

/// The NVML index of CUDA device `ordinal` under `CUDA_VISIBLE_DEVICES` = `variable` (`None`:
/// unset), with `uuids` giving every NVML device's UUID in NVML's order (asked only when the
/// variable names UUIDs). Fails naming the variable when the device is not visible or cannot
/// be mapped.
pub(crate) fn nvml_index(
    ordinal: u32,
    variable: Option<&str>,
    uuids: impl FnOnce() -> Result<Vec<String>, String>,
) -> Result<u32, String> {
    let numbers = match parse(variable) {
        Visible::All => return Ok(ordinal),
        Visible::Numbers(numbers) => numbers,
        Visible::Uuids(candidates) => numbers_of(&candidates, &uuids()?),
        Visible::Mig => {
            return Err(format!(
                "{VARIABLE} names MIG instances, which are not NVML devices"
            ));
        }
    };
    numbers.get(ordinal as usize).copied().ok_or_else(|| {
        format!(
            "CUDA device {ordinal} is not visible ({VARIABLE}={:?} leaves {} device(s))",
            variable.unwrap_or_default(),
            numbers.len()
        )
    })
}

/// The CUDA device number NVML device `index` has in this process, or `None` when
/// `CUDA_VISIBLE_DEVICES` hides it (or names MIG instances).
pub(crate) fn cuda_ordinal(
    index: u32,
    variable: Option<&str>,
    uuids: impl FnOnce() -> Result<Vec<String>, String>,
) -> Option<u32> {
    let numbers = match parse(variable) {
        Visible::All => return Some(index),
        Visible::Numbers(numbers) => numbers,
        Visible::Uuids(candidates) => numbers_of(&candidates, &uuids().ok()?),
        Visible::Mig => return None,
    };
    let position = numbers.iter().position(|&number| number == index)?;
    u32::try_from(position).ok()
}

fn parse(variable: Option<&str>) -> Visible {
    let Some(variable) = variable else {
        return Visible::All;
    };
    if variable.starts_with("MIG-") {
        return Visible::Mig;
    }
    if variable.starts_with("GPU-") {
        let mut uuids: Vec<String> = Vec::new();
        for entry in variable.split(',') {
            if uuids.iter().any(|uuid| uuid == entry) {
                return Visible::Uuids(Vec::new());
            }
            if !entry.starts_with("GPU-") {
                break;
            }
            uuids.push(entry.to_owned());
        }
        return Visible::Uuids(uuids);
    }
    let mut numbers = Vec::new();
    for entry in variable.split(',') {
        let Some(number) = leading_number(entry.trim()) else {
            break;
        };
        if numbers.contains(&number) {
            return Visible::Numbers(Vec::new());
        }
        numbers.push(number);
    }
    Visible::Numbers(numbers)
}

/// The number an entry starts with, as `strtoul` reads it (an optional `+`, then digits);
/// `None` for none, or a negative one.
fn leading_number(entry: &str) -> Option<u32> {
    let digits = entry.strip_prefix('+').unwrap_or(entry);
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}

/// The NVML numbers of UUID candidates, each a unique prefix of one of `uuids`: up to the first
/// that matches none or several; none at all when two name the same device.
fn numbers_of(candidates: &[String], uuids: &[String]) -> Vec<u32> {
    let mut numbers = Vec::new();
    for candidate in candidates {
        let mut matches = uuids
            .iter()
            .enumerate()
            .filter(|(_, uuid)| uuid.starts_with(candidate.as_str()));
        let (Some((index, _)), None) = (matches.next(), matches.next()) else {
            break;
        };
        let Ok(number) = u32::try_from(index) else {
            break;
        };
        if numbers.contains(&number) {
            return Vec::new();
        }
        numbers.push(number);
    }
    numbers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_uuids() -> Result<Vec<String>, String> {
        panic!("a list of numbers needs no UUIDs")
    }

    fn uuids() -> Result<Vec<String>, String> {
        Ok(vec![
            "GPU-aaaa1111".to_owned(),
            "GPU-bbbb2222".to_owned(),
            "GPU-bbbb3333".to_owned(),
        ])
    }

    #[test]
    fn unset_means_every_device_in_nvml_order() {
        assert_eq!(nvml_index(3, None, no_uuids), Ok(3));
        assert_eq!(cuda_ordinal(3, None, no_uuids), Some(3));
    }

    #[test]
    fn numbers_are_read_like_strtoul_up_to_the_first_that_is_not_one() {
        assert_eq!(nvml_index(0, Some("3,1"), no_uuids), Ok(3));
        assert_eq!(nvml_index(1, Some(" 3 , 1 "), no_uuids), Ok(1));
        assert_eq!(nvml_index(1, Some("1gpu2,2ampere"), no_uuids), Ok(2));
        assert_eq!(nvml_index(0, Some("+2"), no_uuids), Ok(2));
        // A negative or empty entry ends the list.
        assert!(nvml_index(1, Some("0,-1,2"), no_uuids).is_err());
        assert!(nvml_index(1, Some("0,,2"), no_uuids).is_err());
        assert!(nvml_index(0, Some(""), no_uuids).is_err());
        assert_eq!(cuda_ordinal(1, Some("3,1"), no_uuids), Some(1));
        assert_eq!(cuda_ordinal(3, Some("3,1"), no_uuids), Some(0));
        assert_eq!(cuda_ordinal(0, Some("3,1"), no_uuids), None);
    }

    #[test]
    fn a_device_named_twice_hides_every_device() {
        let error = nvml_index(0, Some("1,0,1"), no_uuids).unwrap_err();
        assert!(error.contains("CUDA device 0 is not visible"), "{error}");
        assert!(error.contains("CUDA_VISIBLE_DEVICES=\"1,0,1\""), "{error}");
        assert!(error.contains("0 device(s)"), "{error}");
        assert!(nvml_index(0, Some("GPU-aaaa,GPU-aaaa"), uuids).is_err());
        // Two prefixes of one device also name it twice.
        assert!(nvml_index(0, Some("GPU-aaaa,GPU-aaaa1"), uuids).is_err());
    }

    #[test]
    fn uuids_and_unique_prefixes_map_to_nvml_numbers() {
        assert_eq!(nvml_index(0, Some("GPU-bbbb3333,GPU-a"), uuids), Ok(2));
        assert_eq!(nvml_index(1, Some("GPU-bbbb3333,GPU-a"), uuids), Ok(0));
        // An ambiguous prefix (two devices start with it) ends the list, as does an unknown one.
        assert!(nvml_index(0, Some("GPU-bbbb,GPU-a"), uuids).is_err());
        assert!(nvml_index(1, Some("GPU-a,GPU-cccc,GPU-bbbb2"), uuids).is_err());
        // So does an entry that is not a UUID.
        assert!(nvml_index(1, Some("GPU-a,1"), uuids).is_err());
        assert_eq!(cuda_ordinal(2, Some("GPU-bbbb3333,GPU-a"), uuids), Some(0));
        assert_eq!(cuda_ordinal(1, Some("GPU-bbbb3333,GPU-a"), uuids), None);
        // Without NVML's UUIDs, nothing maps.
        let failed = || Err("no NVML".to_owned());
        assert_eq!(
            nvml_index(0, Some("GPU-a"), failed),
            Err("no NVML".to_owned())
        );
        assert_eq!(cuda_ordinal(0, Some("GPU-a"), failed), None);
    }

    #[test]
    fn mig_instances_are_not_mapped() {
        let error = nvml_index(0, Some("MIG-1234"), no_uuids).unwrap_err();
        assert!(error.contains("MIG"), "{error}");
        assert_eq!(cuda_ordinal(0, Some("MIG-1234"), no_uuids), None);
    }
}
