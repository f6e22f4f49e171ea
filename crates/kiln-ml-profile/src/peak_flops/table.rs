//! The peak dense FLOP/s table and how GPU names find their row.
//!
//! | GPU | FP64 | FP32 | TF32 | BF16 | FP16 | INT8 (TOPS) |
//! |---|---|---|---|---|---|---|
//! | H100 SXM | 34 | 67 | 494.5 | 989.5 | 989.5 | 1979 |
//! | H100 PCIe | 25.6 | 51.2 | 378 | 756 | 756 | 1513 |
//! | H200 SXM | 34 | 67 | 494.5 | 989.5 | 989.5 | 1979 |
//! | A100 (SXM = PCIe) | 9.7 | 19.5 | 156 | 312 | 312 | 624 |
//! | T4 | — | 8.1 | — | — | 65 | 130 |
//! | RTX 4090 | — | 82.6 | 82.6 | 165.2 | 165.2 | 660.6 |
//! | RTX 3050 8 GB, **estimate** | — | 9.1 | 9.1 | 18.2 | 18.2 | — |
//!
//! TFLOPS, dense: NVIDIA's datasheets print tensor-core rates with 2:4 sparsity, and dense is
//! half of those (mixing the two is a known MFU error: foundation-model-stack/fms-fsdp #89,
//! NVIDIA/Megatron-LM #1276). A dash is a precision the GPU lacks or the source does not give.
//!
//! Sources:
//! - H100 SXM and PCIe: NVIDIA H100 Tensor Core GPU datasheet
//!   (<https://resources.nvidia.com/en-us-tensor-core>), as Lightning's `_CUDA_FLOPS`
//!   (`src/lightning/fabric/utilities/throughput.py`) carries them.
//! - H200 SXM: NVIDIA H200 datasheet (<https://www.nvidia.com/en-us/data-center/h200/>); the
//!   same compute as the H100 SXM with more memory. Lightning lacked it
//!   (Lightning-AI/pytorch-lightning #20660).
//! - A100: NVIDIA A100 datasheet (`nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf`); FP64 is
//!   the non-tensor rate (19.5 on FP64 tensor cores).
//! - T4: NVIDIA T4 datasheet (`t4-tensor-core-datasheet-951643.pdf`); Turing has no TF32 or BF16.
//! - RTX 4090: NVIDIA Ada Lovelace architecture whitepaper, appendix (the FP16 and BF16 tensor
//!   rates with FP32 accumulate; 330.3 with FP16 accumulate). **Caveat**: Lightning's GeForce
//!   entries are CUDA-core rates (82.6 for every float precision), which overstates MFU on
//!   tensor cores about 2× (redai-studio/Relax PR #83 found the same for the RTX 3070 Ti).
//! - RTX 3050 8 GB: **derived, not quoted**: 2560 CUDA cores × 2 × 1.777 GHz ≈ 9.1 FP32, with the
//!   GA10x GeForce ratio (tensor FP16/BF16 with FP32 accumulate = 2 × FP32). Lightning has no
//!   3050 entry. The 6 GB and OEM variants (2304 cores) and laptop parts (clocks set by TGP)
//!   differ, so only the plain name matches.
//!
//! Not in the table: the H100 NVL. NVIDIA's first H100 NVL figures were for a pair of boards
//! joined by NVLink (134 TFLOPS FP32), Lightning's `h100 nvl` row keeps those, and per-board
//! figures differ between sources, so kiln gives `None` and leaves the peak to the user.

use super::MatmulFormat;

/// One GPU's peaks, in TFLOPS (TOPS for INT8).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PeakRow {
    /// The GPU, as reports name it (`H100 SXM`).
    pub gpu: &'static str,
    /// Peaks in the order of [`MatmulFormat::ALL`]; `None` where the GPU lacks the precision.
    pub tera: [Option<f64>; 6],
    /// How the row was derived, when it is an estimate rather than a vendor figure.
    pub estimate: Option<&'static str>,
}

impl PeakRow {
    /// The peak at `precision`, in TFLOPS (TOPS for INT8).
    pub fn tera(&self, precision: MatmulFormat) -> Option<f64> {
        self.tera[precision as usize]
    }
}

const fn vendor(gpu: &'static str, tera: [Option<f64>; 6]) -> PeakRow {
    PeakRow {
        gpu,
        tera,
        estimate: None,
    }
}

/// H100 SXM5 (80 GB HBM3).
pub const H100_SXM: PeakRow = vendor(
    "H100 SXM",
    [
        Some(34.0),
        Some(67.0),
        Some(494.5),
        Some(989.5),
        Some(989.5),
        Some(1979.0),
    ],
);
/// H100 PCIe (80 GB HBM2e).
pub const H100_PCIE: PeakRow = vendor(
    "H100 PCIe",
    [
        Some(25.6),
        Some(51.2),
        Some(378.0),
        Some(756.0),
        Some(756.0),
        Some(1513.0),
    ],
);
/// H200 SXM.
pub const H200_SXM: PeakRow = vendor(
    "H200 SXM",
    [
        Some(34.0),
        Some(67.0),
        Some(494.5),
        Some(989.5),
        Some(989.5),
        Some(1979.0),
    ],
);
/// A100, SXM4 or PCIe, 40 or 80 GB.
pub const A100: PeakRow = vendor(
    "A100",
    [
        Some(9.7),
        Some(19.5),
        Some(156.0),
        Some(312.0),
        Some(312.0),
        Some(624.0),
    ],
);
/// T4.
pub const T4: PeakRow = vendor("T4", [None, Some(8.1), None, None, Some(65.0), Some(130.0)]);
/// GeForce RTX 4090, tensor-core rates with FP32 accumulate.
pub const RTX_4090: PeakRow = vendor(
    "RTX 4090",
    [
        None,
        Some(82.6),
        Some(82.6),
        Some(165.2),
        Some(165.2),
        Some(660.6),
    ],
);
/// GeForce RTX 3050 8 GB: an estimate.
pub const RTX_3050: PeakRow = PeakRow {
    gpu: "RTX 3050",
    tera: [None, Some(9.1), Some(9.1), Some(18.2), Some(18.2), None],
    estimate: Some(
        "RTX 3050 8 GB, not a vendor figure: 2560 CUDA cores × 2 FLOPs × 1.777 GHz ≈ 9.1 TFLOPS \
         FP32 and TF32; FP16 and BF16 tensor cores with FP32 accumulate = 2 × FP32 (the GA10x \
         GeForce ratio)",
    ),
};

/// Every row.
pub const ROWS: [PeakRow; 7] = [H100_SXM, H100_PCIE, H200_SXM, A100, T4, RTX_4090, RTX_3050];

/// The row for a GPU name (see [`lookup`](super::lookup) for the rules), or `None`.
pub fn row_for_name(gpu_name: &str) -> Option<&'static PeakRow> {
    let lower = gpu_name.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|word| !word.is_empty())
        .collect();
    let has = |wanted: &str| words.contains(&wanted);

    if has("h100") {
        if has("nvl") {
            None
        } else if has("hbm3") || words.iter().any(|word| word.starts_with("sxm")) {
            Some(&H100_SXM)
        } else if has("pcie") || has("hbm2e") {
            Some(&H100_PCIE)
        } else {
            None
        }
    } else if has("h200") {
        (!has("nvl")).then_some(&H200_SXM)
    } else if has("a100") {
        Some(&A100)
    } else if has("t4") {
        Some(&T4)
    } else {
        match geforce_number(&words)? {
            "4090" => Some(&RTX_4090),
            "3050" => Some(&RTX_3050),
            _ => None,
        }
    }
}

/// The model number after `rtx`, when nothing follows it (`Ti`, `SUPER`, `Laptop GPU` and memory
/// sizes name other parts).
fn geforce_number<'a>(words: &[&'a str]) -> Option<&'a str> {
    match words.iter().position(|word| *word == "rtx") {
        Some(at) if at + 2 == words.len() => Some(words[at + 1]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_reads_back_its_columns() {
        let expected: [(&str, [Option<f64>; 6]); 7] = [
            (
                "H100 SXM",
                [
                    Some(34.0),
                    Some(67.0),
                    Some(494.5),
                    Some(989.5),
                    Some(989.5),
                    Some(1979.0),
                ],
            ),
            (
                "H100 PCIe",
                [
                    Some(25.6),
                    Some(51.2),
                    Some(378.0),
                    Some(756.0),
                    Some(756.0),
                    Some(1513.0),
                ],
            ),
            (
                "H200 SXM",
                [
                    Some(34.0),
                    Some(67.0),
                    Some(494.5),
                    Some(989.5),
                    Some(989.5),
                    Some(1979.0),
                ],
            ),
            (
                "A100",
                [
                    Some(9.7),
                    Some(19.5),
                    Some(156.0),
                    Some(312.0),
                    Some(312.0),
                    Some(624.0),
                ],
            ),
            ("T4", [None, Some(8.1), None, None, Some(65.0), Some(130.0)]),
            (
                "RTX 4090",
                [
                    None,
                    Some(82.6),
                    Some(82.6),
                    Some(165.2),
                    Some(165.2),
                    Some(660.6),
                ],
            ),
            (
                "RTX 3050",
                [None, Some(9.1), Some(9.1), Some(18.2), Some(18.2), None],
            ),
        ];
        for (row, (gpu, tera)) in ROWS.iter().zip(expected) {
            assert_eq!(row.gpu, gpu);
            for (precision, want) in MatmulFormat::ALL.into_iter().zip(tera) {
                assert_eq!(row.tera(precision), want, "{gpu} {precision:?}");
            }
        }
        assert!(
            ROWS.iter()
                .all(|row| row.estimate.is_none() == (row.gpu != "RTX 3050"))
        );
    }

    #[test]
    fn names_find_rows() {
        let gpu = |name| row_for_name(name).map(|row| row.gpu);
        assert_eq!(gpu("NVIDIA H100 80GB HBM3"), Some("H100 SXM"));
        assert_eq!(gpu("NVIDIA H100 PCIe"), Some("H100 PCIe"));
        assert_eq!(gpu("NVIDIA H200"), Some("H200 SXM"));
        assert_eq!(gpu("NVIDIA A100-SXM4-80GB"), Some("A100"));
        assert_eq!(gpu("NVIDIA A100 80GB PCIe"), Some("A100"));
        assert_eq!(gpu("NVIDIA GeForce RTX 4090"), Some("RTX 4090"));
        assert_eq!(gpu("Tesla T4"), Some("T4"));
        assert_eq!(gpu("NVIDIA GeForce RTX 3050"), Some("RTX 3050"));
        assert_eq!(gpu("NVIDIA H100"), None);
        assert_eq!(gpu("NVIDIA GeForce RTX 4090 SUPER"), None);
        assert_eq!(gpu("NVIDIA GeForce RTX"), None);
    }
}
