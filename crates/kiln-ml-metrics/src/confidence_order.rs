//! The order of probabilities and confidences, shared by mode ranking and precision/recall.

use std::cmp::Ordering;

/// `a` against `b` in `f32::total_cmp`'s order, except that −0 and +0 are equal, as they are
/// to the tensor path's comparisons and to a stable sort by value (Argoverse's): a
/// probability of −0 passes the `>= 0` check and must tie with 0, not rank below it.
pub(crate) fn cmp_signless(a: f32, b: f32) -> Ordering {
    (a + 0.0).total_cmp(&(b + 0.0))
}
