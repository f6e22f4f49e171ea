//! Consecutive windows of about a given size, balanced: what the block shuffle shuffles and the
//! length-aware batching groups, so that the two cut an epoch at the same places.

use std::ops::Range;

/// The consecutive windows of `0..len` for windows of about `window` positions: `⌈len / window⌉`
/// of them, their sizes differing by at most one, so no window is much smaller than the others
/// (a tiny last window would leave the end of the epoch poorly mixed). A `window` below 2 gives
/// one window of everything.
pub(crate) fn balanced_windows(len: usize, window: usize) -> impl Iterator<Item = Range<usize>> {
    let windows = if window < 2 {
        1
    } else {
        len.div_ceil(window).max(1)
    };
    let (base, longer) = (len / windows, len % windows);
    (0..windows).scan(0, move |start, index| {
        let end = *start + base + usize::from(index < longer);
        Some(std::mem::replace(start, end)..end)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_balanced_and_cover_everything() {
        let sizes = |len, window| -> Vec<usize> {
            balanced_windows(len, window)
                .map(|range| range.len())
                .collect()
        };
        assert_eq!(
            sizes(100_000, 16_384),
            [14_286, 14_286, 14_286, 14_286, 14_286, 14_285, 14_285]
        );
        assert_eq!(sizes(10, 5), [5, 5]);
        assert_eq!(sizes(11, 5), [4, 4, 3]);
        assert_eq!(sizes(7, 0), [7]);
        assert_eq!(sizes(0, 4), [0]);
        let ranges: Vec<_> = balanced_windows(11, 5).collect();
        assert_eq!(ranges, [0..4, 4..8, 8..11]);
    }
}
