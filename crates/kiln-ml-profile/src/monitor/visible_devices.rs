//! Which NVML device a CUDA device is: CUDA numbers the devices `CUDA_VISIBLE_DEVICES` leaves
//! visible, in its order, from 0; NVML numbers every GPU of the machine. Mapped as PyTorch's
//! `torch.cuda._get_nvml_device_index` maps it, after the CUDA documentation: a list of device
//! numbers (`"2,3"`, read like `strtoul`, so `"1gpu2"` is 1) or of GPU UUIDs and unique
//! prefixes of them (`"GPU-5f2c"`); the list stops at its first entry that is neither, or that
//! names no device of the machine, and a device named twice hides every device.
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

/// Where a GPU stands for CUDA in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CudaNumber {
    /// CUDA device `N` (`cuda:N`).
    Visible(u32),
    /// `CUDA_VISIBLE_DEVICES` hides it.
    Hidden,
    /// Not known: the variable names MIG instances, or NVML's UUIDs could not be read.
    Unknown,
}

/// CUDA's devices in CUDA's order, as NVML indices: read once from `CUDA_VISIBLE_DEVICES`, then
/// asked both ways.
pub(crate) struct CudaOrder {
    /// The NVML index of each CUDA device, or why it is not known.
    devices: Result<Vec<u32>, String>,
    /// The variable, for the errors (`None`: unset).
    variable: Option<String>,
    /// The machine's NVML devices.
    count: u32,
}

impl CudaOrder {
    /// The order under `CUDA_VISIBLE_DEVICES` = `variable` (`None`: unset), on a machine of
    /// `count` NVML devices whose UUIDs `uuids` gives in NVML's order (asked only when the
    /// variable names UUIDs).
    pub(crate) fn read(
        variable: Option<&str>,
        count: u32,
        uuids: impl FnOnce() -> Result<Vec<String>, String>,
    ) -> Self {
        let devices = match parse(variable, count) {
            Visible::All => Ok((0..count).collect()),
            Visible::Numbers(numbers) => Ok(numbers),
            Visible::Uuids(candidates) => uuids().map(|uuids| numbers_of(&candidates, &uuids)),
            Visible::Mig => Err(format!(
                "{VARIABLE} names MIG instances, which are not NVML devices"
            )),
        };
        Self {
            devices,
            variable: variable.map(str::to_owned),
            count,
        }
    }

    /// The NVML index of CUDA device `ordinal`; fails naming the variable when the device is
    /// not visible or cannot be mapped.
    pub(crate) fn nvml_index(&self, ordinal: u32) -> Result<u32, String> {
        let devices = self.devices.as_ref().map_err(String::clone)?;
        let count = self.count;
        devices
            .get(ordinal as usize)
            .copied()
            .ok_or_else(|| match &self.variable {
                Some(variable) => format!(
                    "CUDA device {ordinal} is not visible ({VARIABLE}={variable:?} leaves {} of \
                     the machine's {count} GPU(s))",
                    devices.len()
                ),
                None => {
                    format!("CUDA device {ordinal} does not exist (the machine has {count} GPU(s))")
                }
            })
    }

    /// Where NVML device `index` stands for CUDA in this process.
    pub(crate) fn cuda_number(&self, index: u32) -> CudaNumber {
        let Ok(devices) = &self.devices else {
            return CudaNumber::Unknown;
        };
        match devices.iter().position(|&number| number == index) {
            Some(position) => {
                u32::try_from(position).map_or(CudaNumber::Unknown, CudaNumber::Visible)
            }
            None => CudaNumber::Hidden,
        }
    }
}

/// The variable's list; device numbers stop at the first that is not a device of the
/// machine's `count`, as CUDA stops at an invalid one.
fn parse(variable: Option<&str>, count: u32) -> Visible {
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
        let Some(number) = leading_number(entry.trim()).filter(|&number| number < count) else {
            break;
        };
        if numbers.contains(&number) {
            return Visible::Numbers(Vec::new());
        }
        numbers.push(number);
    }
    Visible::Numbers(numbers)
}

/// The number an entry starts with, as `strtoul` reads it (a sign, then digits); `None` for
/// none, or a negative one (`-0` is 0).
fn leading_number(entry: &str) -> Option<u32> {
    let (negative, digits) = match entry.strip_prefix('-') {
        Some(digits) => (true, digits),
        None => (false, entry.strip_prefix('+').unwrap_or(entry)),
    };
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    let number: u32 = digits[..end].parse().ok()?;
    (!negative || number == 0).then_some(number)
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
    use super::CudaNumber::{Hidden, Unknown, Visible};
    use super::*;

    fn nvml_index(
        ordinal: u32,
        variable: Option<&str>,
        count: u32,
        uuids: impl FnOnce() -> Result<Vec<String>, String>,
    ) -> Result<u32, String> {
        CudaOrder::read(variable, count, uuids).nvml_index(ordinal)
    }

    fn cuda_number(
        index: u32,
        variable: Option<&str>,
        count: u32,
        uuids: impl FnOnce() -> Result<Vec<String>, String>,
    ) -> CudaNumber {
        CudaOrder::read(variable, count, uuids).cuda_number(index)
    }

    /// A machine of 4 GPUs.
    const COUNT: u32 = 4;

    fn no_uuids() -> Result<Vec<String>, String> {
        panic!("a list of numbers needs no UUIDs")
    }

    fn uuids() -> Result<Vec<String>, String> {
        Ok([
            "GPU-aaaa1111",
            "GPU-bbbb2222",
            "GPU-bbbb3333",
            "GPU-cccc4444",
        ]
        .map(str::to_owned)
        .to_vec())
    }

    fn index(ordinal: u32, variable: &str) -> Result<u32, String> {
        nvml_index(ordinal, Some(variable), COUNT, uuids)
    }

    fn number(index: u32, variable: &str) -> CudaNumber {
        cuda_number(index, Some(variable), COUNT, uuids)
    }

    #[test]
    fn unset_means_every_device_in_nvml_order() {
        assert_eq!(nvml_index(3, None, COUNT, no_uuids), Ok(3));
        let error = nvml_index(4, None, COUNT, no_uuids).unwrap_err();
        assert!(error.contains("CUDA device 4 does not exist"), "{error}");
        assert_eq!(cuda_number(3, None, COUNT, no_uuids), Visible(3));
    }

    #[test]
    fn numbers_are_read_like_strtoul_up_to_the_first_that_is_not_a_device() {
        assert_eq!(nvml_index(0, Some("3,1"), COUNT, no_uuids), Ok(3));
        assert_eq!(index(1, " 3 , 1 "), Ok(1));
        assert_eq!(index(1, "1gpu2,2ampere"), Ok(2));
        assert_eq!(index(0, "+2"), Ok(2));
        assert_eq!(index(0, "-0"), Ok(0));
        // A negative or empty entry ends the list, as does one past the machine's devices.
        assert!(index(1, "0,-1,2").is_err());
        assert!(index(1, "0,,2").is_err());
        assert!(index(0, "").is_err());
        assert!(index(1, "0,7,1").unwrap_err().contains("leaves 1 of"));
        assert_eq!(number(1, "0,7,1"), Hidden);
        assert_eq!(number(1, "3,1"), Visible(1));
        assert_eq!(number(3, "3,1"), Visible(0));
        assert_eq!(number(0, "3,1"), Hidden);
    }

    #[test]
    fn a_device_named_twice_hides_every_device() {
        let error = index(0, "1,0,1").unwrap_err();
        assert!(error.contains("CUDA device 0 is not visible"), "{error}");
        assert!(error.contains("CUDA_VISIBLE_DEVICES=\"1,0,1\""), "{error}");
        assert!(error.contains("leaves 0 of the machine's 4"), "{error}");
        assert_eq!(number(1, "1,0,1"), Hidden);
        assert!(index(0, "GPU-aaaa,GPU-aaaa").is_err());
        // Two prefixes of one device also name it twice.
        assert!(index(0, "GPU-aaaa,GPU-aaaa1").is_err());
    }

    #[test]
    fn uuids_and_unique_prefixes_map_to_nvml_numbers() {
        assert_eq!(index(0, "GPU-bbbb3333,GPU-a"), Ok(2));
        assert_eq!(index(1, "GPU-bbbb3333,GPU-a"), Ok(0));
        // An ambiguous prefix (two devices start with it) ends the list, as does an unknown one.
        assert!(index(0, "GPU-bbbb,GPU-a").is_err());
        assert!(index(1, "GPU-a,GPU-dddd,GPU-bbbb2").is_err());
        // So does an entry that is not a UUID.
        assert!(index(1, "GPU-a,1").is_err());
        assert_eq!(number(2, "GPU-bbbb3333,GPU-a"), Visible(0));
        assert_eq!(number(1, "GPU-bbbb3333,GPU-a"), Hidden);
        // Without NVML's UUIDs the mapping is unknown.
        let failed = || Err("no NVML".to_owned());
        assert_eq!(
            nvml_index(0, Some("GPU-a"), COUNT, failed),
            Err("no NVML".to_owned())
        );
        assert_eq!(cuda_number(0, Some("GPU-a"), COUNT, failed), Unknown);
    }

    #[test]
    fn mig_instances_are_not_mapped() {
        let error = nvml_index(0, Some("MIG-1234"), COUNT, no_uuids).unwrap_err();
        assert!(error.contains("MIG"), "{error}");
        assert_eq!(cuda_number(0, Some("MIG-1234"), COUNT, no_uuids), Unknown);
    }
}
