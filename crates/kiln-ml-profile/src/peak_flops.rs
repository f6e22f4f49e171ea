//! Peak dense FLOP/s by GPU and precision: the denominator of MFU, with where each figure
//! comes from.
//!
//! [`lookup`] reads a table of vendor figures (sources in [`table`]): dense rates, not the 2:4
//! sparse ones that datasheets print first. [`from_clocks`] derives an FP32 estimate from the
//! CUDA-core count and clock that NVML reports, for GPUs the table lacks. Both say `None` rather
//! than guess a wrong number: an unknown name, a variant whose figures differ (H100 NVL, RTX 4090
//! D, laptop parts), a precision the GPU lacks (BF16 on a T4). The user can always give the peak
//! ([`PeakFlops::user`]).
//!
//! Which precision to look up is the one the matmuls run in, which is not always the tensors'
//! type: an FP32 matmul on Ampere or later may run on TF32 tensor cores (PyTorch's default
//! unless `float32_matmul_precision` is `highest`, and Lightning looks up the TF32 peak then).
//! Burn has no TF32 switch; whether a CubeCL kernel uses TF32 depends on the kernel it picks,
//! so kiln reports which peak it divided by, and [`MatmulFormat::F32`] is the conservative choice
//! for MFU only if the kernels stay on CUDA cores.

pub mod table;

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// The number format the matmuls run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum MatmulFormat {
    /// FP64 on the FP64 units (not the FP64 tensor-core rate of A100 and H100).
    F64,
    /// FP32 on CUDA cores.
    F32,
    /// TF32 tensor cores (FP32 tensors, 10-bit mantissa products); Ampere and later.
    Tf32,
    /// BF16 tensor cores, FP32 accumulate; Ampere and later.
    Bf16,
    /// FP16 tensor cores, FP32 accumulate (what mixed-precision training uses; GeForce cards
    /// double their rate with FP16 accumulate, which this table does not use).
    F16,
    /// INT8 tensor cores, in integer operations per second (TOPS), not FLOP/s.
    Int8,
}

impl MatmulFormat {
    /// Every precision, in the order of the table's columns.
    pub const ALL: [MatmulFormat; 6] = [
        MatmulFormat::F64,
        MatmulFormat::F32,
        MatmulFormat::Tf32,
        MatmulFormat::Bf16,
        MatmulFormat::F16,
        MatmulFormat::Int8,
    ];
}

/// Where a peak figure comes from; reports print it next to the MFU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
#[non_exhaustive]
pub enum PeakSource {
    /// A vendor figure from [`table`] for this GPU.
    Table {
        /// The table's row (`H100 SXM`): borrowed from the table, owned when read back from
        /// JSON.
        gpu: Cow<'static, str>,
    },
    /// A derived value (the RTX 3050 row, or [`from_clocks`]): treat MFU against it as an
    /// estimate.
    Estimate {
        /// How it was derived.
        how: String,
    },
    /// Given by the user.
    User,
}

/// A peak dense rate and where it comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeakFlops {
    /// The peak, in FLOP/s (operations per second for [`MatmulFormat::Int8`]).
    pub flops_per_s: f64,
    /// Where the figure comes from.
    pub source: PeakSource,
}

impl PeakFlops {
    /// A peak given by the user (a datasheet figure for a GPU the table lacks, or a measured
    /// matmul rate).
    pub fn user(flops_per_s: f64) -> Self {
        Self {
            flops_per_s,
            source: PeakSource::User,
        }
    }
}

/// The table's peak for a GPU as NVML or CUDA names it (`NVIDIA H100 80GB HBM3`, `Tesla T4`)
/// at `precision`; `None` for a GPU the table lacks, or a precision it lacks.
///
/// Names are matched case-insensitively on their words, the way Lightning's
/// `get_available_flops` does, with these choices:
///
/// - `h100` with `hbm3` or `sxm…` is the SXM part, with `pcie` or `hbm2e` the PCIe part. A name
///   with `nvl` gives `None`: NVIDIA's first H100 NVL figures were for a pair of boards, and
///   Lightning's `h100 nvl` row still carries them. A bare `NVIDIA H100` also gives `None`, as
///   in Lightning: the SXM and PCIe peaks differ by 30%, and a guessed SXM peak would understate
///   MFU on a PCIe card.
/// - `h200` is the H200 SXM; `h200` with `nvl` gives `None` (a lower-power part), and `gh200`
///   does not match.
/// - `a100` is any A100 (SXM and PCIe have the same peaks); `t4` the T4.
/// - `rtx 4090` and `rtx 3050` match only with nothing after the number: `Ti`, `SUPER`, `D`,
///   `Laptop GPU` and the 6 GB or OEM 3050 are other chips or clocks. The 3050 row is an
///   estimate ([`PeakSource::Estimate`]).
///
/// ```
/// use kiln_ml_profile::peak_flops::{self, PeakSource, MatmulFormat};
///
/// let peak = peak_flops::lookup("NVIDIA A100-SXM4-80GB", MatmulFormat::Bf16).unwrap();
/// assert_eq!(peak.flops_per_s, 312e12);
/// assert_eq!(peak.source, PeakSource::Table { gpu: "A100".into() });
/// assert!(peak_flops::lookup("Tesla T4", MatmulFormat::Bf16).is_none());
/// ```
pub fn lookup(gpu_name: &str, precision: MatmulFormat) -> Option<PeakFlops> {
    let row = table::row_for_name(gpu_name)?;
    let tera = row.tera(precision)?;
    let source = match row.estimate {
        Some(how) => PeakSource::Estimate {
            how: how.to_owned(),
        },
        None => PeakSource::Table {
            gpu: Cow::Borrowed(row.gpu),
        },
    };
    Some(PeakFlops {
        flops_per_s: tera * 1e12,
        source,
    })
}

/// An FP32 peak from NVML's CUDA-core count (`num_cores`) and highest SM clock
/// (`max_clock_info(Clock::SM)`, MHz): cores × 2 FLOPs (one fused multiply-add) × clock.
///
/// This reproduces the table's FP32 column (RTX 4090: 16384 × 2 × 2.52 GHz ≈ 82.6 TFLOPS; A100:
/// 6912 × 2 × 1.41 GHz ≈ 19.5). Only [`MatmulFormat::F32`] is derived: tensor-core multiples
/// depend on the product line, not only the compute capability (GeForce Ampere and Ada ≈ 2×
/// FP32, A100 16×, H100 SXM ≈ 14.8×), so any other precision gives `None`, as does a zero count
/// or clock.
pub fn from_clocks(
    cuda_cores: u32,
    max_sm_clock_mhz: u32,
    precision: MatmulFormat,
) -> Option<PeakFlops> {
    if precision != MatmulFormat::F32 || cuda_cores == 0 || max_sm_clock_mhz == 0 {
        return None;
    }
    let flops_per_s = f64::from(cuda_cores) * 2.0 * f64::from(max_sm_clock_mhz) * 1e6;
    Some(PeakFlops {
        flops_per_s,
        source: PeakSource::Estimate {
            how: format!(
                "{cuda_cores} CUDA cores × 2 FLOPs × {max_sm_clock_mhz} MHz (FP32 on CUDA cores, \
                 from NVML's core count and highest SM clock)"
            ),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tera(name: &str, precision: MatmulFormat) -> Option<f64> {
        // Rounded to the table's digits: `tera × 1e12 / 1e12` need not give `tera` back exactly.
        lookup(name, precision).map(|peak| (peak.flops_per_s / 1e9).round() / 1e3)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn names_pick_their_rows() {
        let bf16 = |name| tera(name, MatmulFormat::Bf16);
        assert_eq!(bf16("NVIDIA H100 80GB HBM3"), Some(989.5));
        assert_eq!(bf16("NVIDIA H100 SXM5 80GB"), Some(989.5));
        assert_eq!(bf16("NVIDIA H100 PCIe"), Some(756.0));
        assert_eq!(bf16("NVIDIA H100 80GB HBM2e"), Some(756.0));
        assert_eq!(bf16("NVIDIA H200"), Some(989.5));
        assert_eq!(bf16("NVIDIA A100-SXM4-80GB"), Some(312.0));
        assert_eq!(bf16("NVIDIA A100-PCIE-40GB"), Some(312.0));
        assert_eq!(bf16("NVIDIA GeForce RTX 4090"), Some(165.2));
        assert_eq!(tera("Tesla T4", MatmulFormat::F16), Some(65.0));
        assert_eq!(
            tera("nvidia geforce rtx 3050", MatmulFormat::F32),
            Some(9.1)
        );
    }

    #[test]
    fn sources_say_table_or_estimate() {
        let h100 = lookup("NVIDIA H100 PCIe", MatmulFormat::F32).unwrap();
        assert_eq!(
            h100.source,
            PeakSource::Table {
                gpu: "H100 PCIe".into()
            }
        );
        let rtx3050 = lookup("NVIDIA GeForce RTX 3050", MatmulFormat::Bf16).unwrap();
        assert!(matches!(rtx3050.source, PeakSource::Estimate { ref how } if how.contains("2560")));
        assert_eq!(PeakFlops::user(1e12).source, PeakSource::User);
    }

    #[test]
    fn unknown_names_and_variants_give_none() {
        for name in [
            "NVIDIA H100",
            "NVIDIA H100 NVL",
            "NVIDIA H200 NVL",
            "NVIDIA GH200 480GB",
            "NVIDIA GeForce RTX 4090 D",
            "NVIDIA GeForce RTX 4090 Laptop GPU",
            "NVIDIA GeForce RTX 3050 Ti Laptop GPU",
            "NVIDIA GeForce RTX 3050 6GB",
            "NVIDIA GeForce RTX 4080",
            "NVIDIA RTX A6000",
            "NVIDIA L4",
            "Apple M2",
            "",
        ] {
            assert!(lookup(name, MatmulFormat::F32).is_none(), "{name}");
        }
    }

    #[test]
    fn missing_precisions_give_none() {
        assert!(lookup("Tesla T4", MatmulFormat::Bf16).is_none());
        assert!(lookup("Tesla T4", MatmulFormat::Tf32).is_none());
        assert!(lookup("Tesla T4", MatmulFormat::F64).is_none());
        assert!(lookup("NVIDIA GeForce RTX 4090", MatmulFormat::F64).is_none());
        assert!(lookup("NVIDIA GeForce RTX 3050", MatmulFormat::Int8).is_none());
    }

    #[test]
    fn fallback_reproduces_the_table_fp32_column() {
        let rtx4090 = from_clocks(16384, 2520, MatmulFormat::F32).unwrap();
        assert!(close(rtx4090.flops_per_s, 82.575_36e12));
        assert!(
            (rtx4090.flops_per_s / 1e12
                - tera("NVIDIA GeForce RTX 4090", MatmulFormat::F32).unwrap())
            .abs()
                < 0.05
        );
        let a100 = from_clocks(6912, 1410, MatmulFormat::F32).unwrap();
        assert!(close(a100.flops_per_s, 19.491_84e12));
        assert!((a100.flops_per_s / 1e12 - 19.5).abs() < 0.01);
        assert!(matches!(a100.source, PeakSource::Estimate { ref how } if how.contains("6912")));
        let rtx3050 = from_clocks(2560, 1777, MatmulFormat::F32).unwrap();
        assert!((rtx3050.flops_per_s / 1e12 - 9.1).abs() < 0.01);
    }

    #[test]
    fn fallback_derives_nothing_but_fp32() {
        for precision in MatmulFormat::ALL {
            let derived = from_clocks(16384, 2520, precision);
            assert_eq!(
                derived.is_some(),
                precision == MatmulFormat::F32,
                "{precision:?}"
            );
        }
        assert!(from_clocks(0, 2520, MatmulFormat::F32).is_none());
        assert!(from_clocks(16384, 0, MatmulFormat::F32).is_none());
    }

    #[test]
    fn precision_and_source_serialize_in_snake_case() {
        let names: Vec<String> = MatmulFormat::ALL
            .iter()
            .map(|p| serde_json::to_string(p).unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "\"f64\"", "\"f32\"", "\"tf32\"", "\"bf16\"", "\"f16\"", "\"int8\""
            ]
        );
        let peak = lookup("Tesla T4", MatmulFormat::Int8).unwrap();
        assert_eq!(
            serde_json::to_string(&peak).unwrap(),
            r#"{"flops_per_s":130000000000000.0,"source":{"kind":"table","gpu":"T4"}}"#
        );
    }

    #[test]
    fn peaks_round_trip_through_json() {
        let peaks = [
            lookup("Tesla T4", MatmulFormat::Int8).unwrap(),
            lookup("NVIDIA GeForce RTX 3050", MatmulFormat::Bf16).unwrap(),
            from_clocks(6912, 1410, MatmulFormat::F32).unwrap(),
            PeakFlops::user(1e15),
        ];
        for peak in peaks {
            let json = serde_json::to_string(&peak).unwrap();
            let back: PeakFlops = serde_json::from_str(&json).unwrap();
            assert_eq!(back, peak, "{json}");
        }
    }
}
