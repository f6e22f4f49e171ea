//! Parameters held twice.
//!
//! A Burn module cloned into two fields (`vec![block; 4]`, or one `Param` assigned twice) keeps
//! one `ParamId` in both places: the weights are tied, and autodiff gives the one leaf one
//! gradient, the sum over its uses. kiln's gradient passes (clipping, accumulation scaling,
//! the data-parallel sum, the fused optimizers' buckets) visit the module and would meet that
//! gradient once per place: scaled twice, counted twice in the clipping norm. Until they take
//! tied parameters in, `Trainer::new` refuses them by name.

use std::collections::HashMap;

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor};

/// The first parameter id `module` holds twice, with the positions (in visiting order) of its
/// first two places.
pub(crate) fn first_tied_param<B: Backend, M: Module<B>>(
    module: &M,
) -> Option<(ParamId, usize, usize)> {
    let mut finder = TiedFinder::default();
    module.visit(&mut finder);
    finder.tied
}

#[derive(Default)]
struct TiedFinder {
    seen: HashMap<ParamId, usize>,
    position: usize,
    tied: Option<(ParamId, usize, usize)>,
}

impl TiedFinder {
    fn see(&mut self, id: ParamId) {
        if self.tied.is_none()
            && let Some(&first) = self.seen.get(&id)
        {
            self.tied = Some((id, first, self.position));
        }
        self.seen.entry(id).or_insert(self.position);
        self.position += 1;
    }
}

impl<B: Backend> ModuleVisitor<B> for TiedFinder {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.see(param.id);
    }
    fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<B, D, Int>>) {
        self.see(param.id);
    }
    fn visit_bool<const D: usize>(&mut self, param: &Param<Tensor<B, D, Bool>>) {
        self.see(param.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::nn::{Linear, LinearConfig};

    #[derive(Module, Debug)]
    struct Pair<B: Backend> {
        first: Linear<B>,
        second: Linear<B>,
    }

    #[test]
    fn a_module_cloned_into_two_fields_is_found() {
        let device = Default::default();
        let layer = LinearConfig::new(2, 2).init::<Flex>(&device);
        let tied = Pair {
            first: layer.clone(),
            second: layer,
        };
        // Weight and bias of `first` are places 0 and 1; `second`'s weight is place 2.
        let (_, first, second) = first_tied_param(&tied).expect("tied");
        assert_eq!((first, second), (0, 2));
        let separate = Pair {
            first: LinearConfig::new(2, 2).init::<Flex>(&device),
            second: LinearConfig::new(2, 2).init::<Flex>(&device),
        };
        assert_eq!(first_tied_param(&separate), None);
    }
}
