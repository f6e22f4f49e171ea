//! Parameter shapes of a module, to refuse checkpoints of a differently shaped model.
//!
//! Burn 0.21's `load_record` does not compare shapes: a checkpoint of a wider model loads
//! silently and the next forward pass panics. Comparing the shapes before and after loading turns
//! that into an error naming the parameter.

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor};

/// The shape of every parameter, in visiting order.
pub(crate) fn param_shapes<B: Backend, M: Module<B>>(module: &M) -> Vec<Vec<usize>> {
    let mut collector = ShapeCollector::default();
    module.visit(&mut collector);
    collector.shapes
}

/// The first parameter whose shape differs, as (index, shape in `left`, shape in `right`).
pub(crate) fn first_shape_difference(
    left: &[Vec<usize>],
    right: &[Vec<usize>],
) -> Option<(usize, String, String)> {
    let describe = |shapes: &[Vec<usize>], index: usize| {
        shapes.get(index).map_or_else(
            || "no such parameter".to_owned(),
            |shape| format!("{shape:?}"),
        )
    };
    (0..left.len().max(right.len()))
        .find(|&index| left.get(index) != right.get(index))
        .map(|index| (index, describe(left, index), describe(right, index)))
}

#[derive(Default)]
struct ShapeCollector {
    shapes: Vec<Vec<usize>>,
}

impl<B: Backend> ModuleVisitor<B> for ShapeCollector {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.shapes.push(param.val().dims().to_vec());
    }
    fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<B, D, Int>>) {
        self.shapes.push(param.val().dims().to_vec());
    }
    fn visit_bool<const D: usize>(&mut self, param: &Param<Tensor<B, D, Bool>>) {
        self.shapes.push(param.val().dims().to_vec());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_the_parameter() {
        let a = vec![vec![4, 2], vec![2]];
        let b = vec![vec![4, 3], vec![3]];
        assert_eq!(first_shape_difference(&a, &a), None);
        assert_eq!(
            first_shape_difference(&a, &b),
            Some((0, "[4, 2]".to_owned(), "[4, 3]".to_owned()))
        );
        assert_eq!(
            first_shape_difference(&a, &a[..1]),
            Some((1, "[2]".to_owned(), "no such parameter".to_owned()))
        );
    }
}
