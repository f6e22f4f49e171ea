//! Checking that every replica holds the same 64-bit fingerprint and counts the same world: at
//! `join`, of the trainer each built (the settings that shape the update and the collective
//! calls, and the parameter shapes); when `fit` starts, of the state it starts from.
//!
//! One all-reduce of small integers: each replica sends 1, the 16 nibbles of a 64-bit
//! fingerprint and their squares. For each nibble position, the replicas' values x_j satisfy
//! Σx_j = N·x and Σx_j² = N·x² only when every x_j equals x (Cauchy–Schwarz), and the sums are
//! exact in f32 while N·15² < 2^24 (N < 74,565 replicas).

/// Nibbles of the fingerprint.
const NIBBLES: usize = 16;

/// Values each replica sends.
pub(crate) const VALUES: usize = 1 + 2 * NIBBLES;

/// What a replica sends: 1 (to count the replicas), its fingerprint's nibbles, their squares.
pub(crate) fn values(fingerprint: u64) -> [u64; VALUES] {
    let mut values = [0; VALUES];
    values[0] = 1;
    for nibble in 0..NIBBLES {
        let x = (fingerprint >> (4 * nibble)) & 0xf;
        values[1 + nibble] = x;
        values[1 + NIBBLES + nibble] = x * x;
    }
    values
}

/// How the replicas disagree.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Disagreement {
    /// This many replicas took part, not the world this one was told.
    World(f64),
    /// Some replica's fingerprint differs from this one's.
    Fingerprint,
}

impl Disagreement {
    /// Says what differs; `fingerprinted` names what the fingerprint covers, for the message of
    /// a different one.
    pub(crate) fn describe(&self, world: u32, fingerprinted: &str) -> String {
        match self {
            Disagreement::World(joined) => format!(
                "{joined} replicas joined, but this one was told the run has {world}: every node \
                 must run the same number of devices"
            ),
            Disagreement::Fingerprint => fingerprinted.to_owned(),
        }
    }
}

/// Checks the sums over every replica of [`values`] against this replica's `fingerprint` and
/// the `world` it was told.
pub(crate) fn check(
    sums: &[f64; VALUES],
    fingerprint: u64,
    world: u32,
) -> Result<(), Disagreement> {
    if sums[0] != f64::from(world) {
        return Err(Disagreement::World(sums[0]));
    }
    let mine = values(fingerprint);
    let agree = (1..VALUES).all(|index| sums[index] == f64::from(world) * mine[index] as f64);
    if agree {
        Ok(())
    } else {
        Err(Disagreement::Fingerprint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sums(fingerprints: &[u64]) -> [f64; VALUES] {
        let mut sums = [0.0; VALUES];
        for &fingerprint in fingerprints {
            for (sum, value) in sums.iter_mut().zip(values(fingerprint)) {
                *sum += value as f64;
            }
        }
        sums
    }

    #[test]
    fn equal_fingerprints_agree_and_any_difference_is_caught() {
        let a = 0x0123_4567_89ab_cdef;
        check(&sums(&[a, a, a]), a, 3).unwrap();
        // The replica in the middle sees the nibble sum it expects (3 + 4 + 5 = 3 · 4): the
        // squares catch it.
        let nibble = |x: u64| a & !0xf | x;
        let three = sums(&[nibble(3), nibble(4), nibble(5)]);
        assert_eq!(check(&three, nibble(4), 3), Err(Disagreement::Fingerprint));
        assert_eq!(
            check(&sums(&[a, a ^ 1 << 60]), a, 2),
            Err(Disagreement::Fingerprint)
        );
        let error = check(&sums(&[a, a]), a, 3).unwrap_err();
        assert_eq!(error, Disagreement::World(2.0));
        assert!(error.describe(3, "").contains("2 replicas joined"));
    }
}
