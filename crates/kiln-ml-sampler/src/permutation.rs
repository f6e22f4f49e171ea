//! Checking that a global order holds every sample of the layout exactly once.

use kiln_ml_core::{Error, Result, SampleId};

/// What is known of a global order before [`check_order`] looks at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// Nothing: it may miss, repeat or invent samples.
    None,
    /// It holds each of its ids once ([`GlobalOrder::is_permutation`](crate::GlobalOrder::is_permutation)),
    /// so only its length can disagree with the layout.
    Permutation,
}

impl Claim {
    /// The claim an order makes through [`GlobalOrder::is_permutation`](crate::GlobalOrder::is_permutation).
    pub(crate) fn of(is_permutation: bool) -> Self {
        if is_permutation {
            Self::Permutation
        } else {
            Self::None
        }
    }
}

/// Fails unless `order` is a permutation of `0..samples`, naming what is wrong: the length, a
/// sample outside the layout, or the first repeated sample and both its positions. An order
/// that [claims](Claim::Permutation) to be a permutation has only its length checked.
///
/// One sequential pass compares the sums of the ids, their squares and their cubes (wrapping)
/// with those of `0..samples`, which any order with a repeat (and so a missing sample) changes
/// unless it is built to match three power sums at once; only then, to name the repeat, a
/// bitset pass with its scattered writes. kiln's own orders claim to be permutations and skip
/// the sums (docs/performance.md, "Plan building", has the cost for the others).
pub(crate) fn check_order(
    order: &[SampleId],
    samples: u64,
    what: &str,
    claim: Claim,
) -> Result<()> {
    if order.len() as u64 != samples {
        return Err(Error::InvalidConfig(format!(
            "{what}: the global order has {} samples but the layout has {samples}: it must hold \
             every sample once",
            order.len()
        )));
    }
    if claim == Claim::Permutation {
        return Ok(());
    }
    let mut sums = PowerSums::default();
    for (at, &id) in order.iter().enumerate() {
        if id >= samples {
            return Err(Error::InvalidConfig(format!(
                "{what}: the global order names sample {id} at position {at}, but the layout \
                 has {samples} samples (ids 0 to {})",
                samples - 1
            )));
        }
        sums.add(id);
    }
    if sums == PowerSums::of_range(samples) {
        return Ok(());
    }
    let (id, first, second) =
        first_repeat(order, samples).expect("power sums differ only when a sample repeats");
    Err(Error::InvalidConfig(format!(
        "{what}: the global order holds sample {id} twice (positions {first} and {second}), so \
         another sample is missing: it must hold every sample once"
    )))
}

/// Wrapping sums of the ids, their squares and their cubes.
#[derive(Debug, Default, PartialEq, Eq)]
struct PowerSums {
    ids: u64,
    squares: u64,
    cubes: u64,
}

impl PowerSums {
    fn add(&mut self, id: u64) {
        let square = id.wrapping_mul(id);
        self.ids = self.ids.wrapping_add(id);
        self.squares = self.squares.wrapping_add(square);
        self.cubes = self.cubes.wrapping_add(square.wrapping_mul(id));
    }

    /// The sums over `0..n` in closed form: n(n-1)/2, (n-1)n(2n-1)/6 and the first squared,
    /// divided exactly (in u128) before the products wrap.
    fn of_range(n: u64) -> Self {
        if n == 0 {
            return Self::default();
        }
        let n = u128::from(n);
        let triangle = (n * (n - 1) / 2) as u64;
        // Of n - 1 and n one is even; of n - 1, n and 2n - 1 one is a multiple of 3.
        let mut factors = [n - 1, n, 2 * n - 1];
        for divisor in [2, 3] {
            let index = factors
                .iter()
                .position(|factor| factor % divisor == 0)
                .expect("one factor is a multiple");
            factors[index] /= divisor;
        }
        let squares = factors
            .iter()
            .fold(1u64, |product, &factor| product.wrapping_mul(factor as u64));
        Self {
            ids: triangle,
            squares,
            cubes: triangle.wrapping_mul(triangle),
        }
    }
}

/// The first sample that occurs twice, with its two positions.
fn first_repeat(order: &[SampleId], samples: u64) -> Option<(SampleId, usize, usize)> {
    let mut seen = vec![0u64; samples.div_ceil(64) as usize];
    for (at, &id) in order.iter().enumerate() {
        let (word, bit) = ((id / 64) as usize, 1u64 << (id % 64));
        if seen[word] & bit != 0 {
            let first = order.iter().position(|&other| other == id)?;
            return Some((id, first, at));
        }
        seen[word] |= bit;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute(n: u64) -> PowerSums {
        let mut sums = PowerSums::default();
        (0..n).for_each(|id| sums.add(id));
        sums
    }

    #[test]
    fn closed_forms_match_the_sums() {
        for n in (0..200).chain([1 << 20, (1 << 20) + 1, (1 << 20) + 2]) {
            assert_eq!(PowerSums::of_range(n), brute(n), "n = {n}");
        }
        // Past 2^32 the products wrap: the u128 forms still agree with wrapping sums, checked
        // here on sums built by parts (their differences are small ranges).
        let n = (1u64 << 33) + 5;
        let mut from_parts = PowerSums::of_range(n - 3);
        (n - 3..n).for_each(|id| from_parts.add(id));
        assert_eq!(PowerSums::of_range(n), from_parts);
    }

    #[test]
    fn a_permutation_passes_and_every_flaw_is_named() {
        check_order(&[3, 1, 0, 2], 4, "test", Claim::None).unwrap();
        check_order(&[], 0, "test", Claim::None).unwrap();
        let short = check_order(&[0, 1, 2], 4, "test", Claim::None)
            .unwrap_err()
            .to_string();
        assert!(
            short.contains("has 3 samples but the layout has 4"),
            "{short}"
        );
        let outside = check_order(&[0, 1, 4, 2], 4, "test", Claim::None)
            .unwrap_err()
            .to_string();
        assert!(outside.contains("sample 4 at position 2"), "{outside}");
        let repeat = check_order(&[0, 2, 2, 3], 4, "test", Claim::None)
            .unwrap_err()
            .to_string();
        assert!(
            repeat.contains("sample 2 twice (positions 1 and 2)"),
            "{repeat}"
        );
        // A claimed permutation has only its length checked.
        check_order(&[0, 2, 2, 3], 4, "test", Claim::Permutation).unwrap();
        check_order(&[0, 1, 2], 4, "test", Claim::Permutation).unwrap_err();
    }
}
