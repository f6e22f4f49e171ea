//! Oriented rectangles and whether two of them share area (Waymo's
//! `ComputeIntersectionArea(...) > 0` for the overlap rate).

/// A rectangle: center, heading of its length axis, length and width.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct OrientedBox {
    corners: [[f64; 2]; 4],
    /// Unit vectors along the length and the width.
    axes: [[f64; 2]; 2],
    /// Whether it has an area at all (a box of zero length or width intersects nothing).
    solid: bool,
}

impl OrientedBox {
    /// Negative sizes count by their magnitude: Waymo's box with length and width -1 (the
    /// padding of an invalid state) is a 1 m square, since both sign flips cancel.
    pub(crate) fn new(center: [f64; 2], heading: f64, length: f64, width: f64) -> Self {
        let (length, width) = (length.abs(), width.abs());
        let (sin, cos) = heading.sin_cos();
        let along = [cos * length / 2.0, sin * length / 2.0];
        let across = [-sin * width / 2.0, cos * width / 2.0];
        let corner = |a: f64, b: f64| {
            [
                center[0] + a * along[0] + b * across[0],
                center[1] + a * along[1] + b * across[1],
            ]
        };
        Self {
            corners: [
                corner(1.0, 1.0),
                corner(-1.0, 1.0),
                corner(-1.0, -1.0),
                corner(1.0, -1.0),
            ],
            axes: [[cos, sin], [-sin, cos]],
            solid: length > 0.0 && width > 0.0,
        }
    }

    /// Whether the two rectangles' interiors intersect, i.e. their intersection has positive
    /// area: no edge normal of either separates them (boxes that only touch do not overlap).
    pub(crate) fn overlaps(&self, other: &OrientedBox) -> bool {
        self.solid
            && other.solid
            && self.axes.iter().chain(&other.axes).all(|axis| {
                let (a_min, a_max) = project(&self.corners, axis);
                let (b_min, b_max) = project(&other.corners, axis);
                a_max > b_min && b_max > a_min
            })
    }
}

fn project(corners: &[[f64; 2]; 4], axis: &[f64; 2]) -> (f64, f64) {
    corners
        .iter()
        .map(|c| c[0] * axis[0] + c[1] * axis[1])
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::f64::consts::FRAC_PI_4;

    #[test]
    fn rectangles_overlap_only_with_positive_area() {
        let a = OrientedBox::new([0.0, 0.0], 0.0, 2.0, 2.0);
        assert!(a.overlaps(&OrientedBox::new([1.5, 0.0], 0.0, 2.0, 2.0)));
        // Touching edges share no area.
        assert!(!a.overlaps(&OrientedBox::new([2.0, 0.0], 0.0, 2.0, 2.0)));
        assert!(!a.overlaps(&OrientedBox::new([0.0, 3.0], 0.0, 2.0, 2.0)));
        // A diamond whose corner pokes into the square's corner region, and one that clears it
        // although its bounding box overlaps the square's.
        let reach = 2f64.sqrt();
        assert!(a.overlaps(&OrientedBox::new(
            [1.0 + reach - 0.1, 1.0],
            FRAC_PI_4,
            2.0,
            2.0
        )));
        assert!(!a.overlaps(&OrientedBox::new([1.9, 1.9], FRAC_PI_4, 2.0, 2.0)));
        // A long thin box across the square.
        assert!(a.overlaps(&OrientedBox::new([0.0, 0.0], FRAC_PI_4, 10.0, 0.1)));
        // A degenerate box has no area.
        assert!(!a.overlaps(&OrientedBox::new([0.0, 0.0], 0.0, 1.0, 0.0)));
        // Padding sizes of -1 make a 1 m square, as in Waymo.
        assert!(a.overlaps(&OrientedBox::new([1.4, 0.0], 0.0, -1.0, -1.0)));
        assert!(!a.overlaps(&OrientedBox::new([1.6, 0.0], 0.0, -1.0, -1.0)));
    }
}
