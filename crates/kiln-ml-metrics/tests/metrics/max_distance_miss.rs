//! The max-distance miss (nuScenes, QCNet's `MAXDE`) is the minimum over the kept modes under
//! either mode selection: QCNet computes it under its default min-FDE selection, where the
//! min-FDE mode may miss while another mode hits.

use crate::common;

use common::Case;
use kiln_ml_metrics::{MetricsConfig, MissRule, ModeSelection, Pruning};

#[test]
fn an_agent_misses_only_when_every_kept_mode_misses() {
    let truth: Vec<[f32; 2]> = (0..4).map(|t| [2.0 * t as f32, 0.0]).collect();
    // Mode 0 ends exactly on the truth (FDE 0) but strays 3 m at step 1; mode 1 stays 1 m off.
    let mut mode_0 = truth.clone();
    mode_0[1][1] = 3.0;
    let mode_1: Vec<[f32; 2]> = truth.iter().map(|&[x, y]| [x, y + 1.0]).collect();
    let case = Case::from_points(&[vec![mode_0, mode_1]], &[truth]);
    for selection in [ModeSelection::MinFde, ModeSelection::Independent] {
        let mut config = MetricsConfig::argoverse2();
        config.top_k = vec![1, 2];
        config.pruning = Pruning::FirstK;
        config.selection = selection;
        config.miss = MissRule::MaxDistance {
            threshold_m: 2.0,
            inclusive: false,
        };
        // Host and tensor paths, asserted to agree.
        let report = case.both(&config);
        assert_eq!(report.at(1).unwrap().miss_rate, Some(1.0), "{selection:?}");
        assert_eq!(report.at(2).unwrap().miss_rate, Some(0.0), "{selection:?}");
        // The min-FDE mode still gives minFDE under either selection.
        assert_eq!(report.at(2).unwrap().min_fde, Some(0.0), "{selection:?}");
        // The tensor path on the GPU-style backend (lavapipe in CI) reads the miss alike.
        #[cfg(feature = "wgpu")]
        if let Some(device) = kiln_ml_testkit::wgpu_device() {
            let on_wgpu = case
                .tensor_on::<burn::backend::Wgpu>(&config, &device)
                .unwrap();
            assert_eq!(on_wgpu.at(1).unwrap().miss_rate, Some(1.0), "{selection:?}");
            assert_eq!(on_wgpu.at(2).unwrap().miss_rate, Some(0.0), "{selection:?}");
        }
    }
}
