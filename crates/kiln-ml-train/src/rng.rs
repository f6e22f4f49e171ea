//! The trainer's random state: a host RNG for user code and per-step backend seeds.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// A host RNG's exact position, as saved in checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct RngState {
    /// The 32-byte ChaCha key.
    pub seed: [u8; 32],
    /// The ChaCha stream.
    pub stream: u64,
    /// High 64 bits of the word position.
    pub word_pos_high: u64,
    /// Low 64 bits of the word position.
    pub word_pos_low: u64,
}

/// The host RNG a run starts with.
pub(crate) fn host_rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// Where `rng` stands.
pub(crate) fn rng_state(rng: &ChaCha8Rng) -> RngState {
    let word_pos = rng.get_word_pos();
    RngState {
        seed: rng.get_seed(),
        stream: rng.get_stream(),
        word_pos_high: (word_pos >> 64) as u64,
        word_pos_low: word_pos as u64,
    }
}

/// An RNG at exactly `state`.
pub(crate) fn rng_from_state(state: &RngState) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::from_seed(state.seed);
    rng.set_stream(state.stream);
    rng.set_word_pos((u128::from(state.word_pos_high) << 64) | u128::from(state.word_pos_low));
    rng
}

/// The backend seed for optimizer step `step` of a run seeded with `seed` (SplitMix64 of the
/// pair, so neighbouring steps get unrelated seeds).
pub(crate) fn step_seed(seed: u64, step: u64) -> u64 {
    let mut z = seed ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn state_round_trip_continues_the_stream() {
        let mut rng = host_rng(7);
        let _: [u64; 5] = rng.random();
        let saved = rng_state(&rng);
        let expected: Vec<u32> = (0..10).map(|_| rng.random()).collect();
        let mut restored = rng_from_state(&saved);
        let got: Vec<u32> = (0..10).map(|_| restored.random()).collect();
        assert_eq!(got, expected);
        let json = serde_json::to_string(&saved).unwrap();
        assert_eq!(serde_json::from_str::<RngState>(&json).unwrap(), saved);
    }

    #[test]
    fn step_seeds_differ_between_steps_and_runs() {
        assert_ne!(step_seed(1, 1), step_seed(1, 2));
        assert_ne!(step_seed(1, 1), step_seed(2, 1));
        assert_eq!(step_seed(5, 9), step_seed(5, 9));
        // Resumed runs rely on the seeds staying the same across kiln versions.
        assert_eq!(step_seed(5, 9), 0xE0F0_3FBE_AD99_DDDF);
    }
}
