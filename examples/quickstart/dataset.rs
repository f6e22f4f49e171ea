//! The synthetic dataset: football players' trajectories in many Parquet files.
//!
//! Each row is one player: 1 s of observed history and 3 s of future at 10 Hz, in pitch
//! coordinates (metres). Players run with a random speed, heading, acceleration and turn rate,
//! and some change direction during the future, so a good forecaster needs several modes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use kiln_ml::core::{FnTransform, transform_fn};
use kiln_ml::data::arrow_array::{Array, ArrayRef, FixedSizeListArray, Float32Array, RecordBatch};
use kiln_ml::data::arrow_schema::{DataType, Field};
use kiln_ml::data::parquet::basic::Compression;
use kiln_ml::data::parquet::file::properties::WriterProperties;
use kiln_ml::data::{DecodeError, RowDecoder, column, decoder_fn, reject_nulls};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use kiln_ml_examples::parquet_file::write_parquet;

/// Observed steps per player (1 s at 10 Hz).
pub const HISTORY: usize = 10;
/// Forecast steps per player (3 s at 10 Hz).
pub const FUTURE: usize = 30;
const STEP_SECONDS: f32 = 0.1;

/// One player as stored: interleaved (x, y) pitch coordinates.
#[derive(Debug, Clone)]
pub struct RawPlayer {
    pub history: Vec<f32>,
    pub future: Vec<f32>,
}

/// One player in its own frame: origin at the last observed position, x along its last
/// observed direction of motion (the agent-centric frame of Argoverse models).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Sample {
    pub history: Vec<f32>,
    pub future: Vec<f32>,
}

/// Writes `players` players into `files` Parquet files of uneven size under `dir`.
pub fn write_split(
    dir: &Path,
    files: u32,
    players: u64,
    row_group_rows: usize,
    seed: u64,
) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let weights: Vec<f64> = (0..files)
        .map(|_| rng.random_range(0.0f64..2.0).exp())
        .collect();
    let sizes = kiln_ml_examples::split_sizes::split_sizes(&weights, players);

    let properties = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(row_group_rows))
        .build();
    let mut paths = Vec::with_capacity(sizes.len());
    for (index, &rows) in sizes.iter().enumerate() {
        let (mut history, mut future) = (Vec::new(), Vec::new());
        for _ in 0..rows {
            let player = simulate(&mut rng);
            history.extend(player.history);
            future.extend(player.future);
        }
        let batch = RecordBatch::try_from_iter([
            ("history", fixed_list(history, 2 * HISTORY)?),
            ("future", fixed_list(future, 2 * FUTURE)?),
        ])?;
        let path = dir.join(format!("players-{index:04}.parquet"));
        write_parquet(&path, &batch, &properties)?;
        paths.push(path);
    }
    Ok(paths)
}

fn fixed_list(values: Vec<f32>, width: usize) -> Result<ArrayRef> {
    let item = Arc::new(Field::new("item", DataType::Float32, false));
    let array = FixedSizeListArray::try_new(
        item,
        width as i32,
        Arc::new(Float32Array::from(values)),
        None,
    )?;
    Ok(Arc::new(array))
}

/// One player's run on a 105 x 68 m pitch.
fn simulate(rng: &mut ChaCha8Rng) -> RawPlayer {
    let (mut x, mut y) = (rng.random_range(0.0..105.0), rng.random_range(0.0..68.0));
    let mut heading: f32 = rng.random_range(-std::f32::consts::PI..std::f32::consts::PI);
    let mut speed: f32 = rng.random_range(0.5..7.0);
    let acceleration: f32 = rng.random_range(-1.5..1.5);
    let mut turn_rate: f32 = rng.random_range(-0.4..0.4);
    // A third of the players cut sharply at some point of the future.
    let cut_step = rng
        .random_bool(0.35)
        .then(|| rng.random_range(HISTORY..HISTORY + FUTURE));
    let cut_rate: f32 = if rng.random_bool(0.5) { 1.6 } else { -1.6 };
    let mut points = Vec::with_capacity(2 * (HISTORY + FUTURE));
    for step in 0..HISTORY + FUTURE {
        if cut_step == Some(step) {
            turn_rate = cut_rate;
        }
        speed = (speed + acceleration * STEP_SECONDS).clamp(0.0, 9.0);
        heading += turn_rate * STEP_SECONDS;
        x += speed * heading.cos() * STEP_SECONDS;
        y += speed * heading.sin() * STEP_SECONDS;
        // Tracking noise of a few centimetres.
        points.push(x + rng.random_range(-0.03..0.03));
        points.push(y + rng.random_range(-0.03..0.03));
    }
    let future = points.split_off(2 * HISTORY);
    RawPlayer {
        history: points,
        future,
    }
}

/// Decodes the `history` and `future` list columns of a row group.
pub fn decoder() -> impl RowDecoder<Item = RawPlayer> + Clone {
    decoder_fn("football-players", 1, |batch: &RecordBatch| {
        let history = list_values(batch, "history", 2 * HISTORY)?;
        let future = list_values(batch, "future", 2 * FUTURE)?;
        Ok(history
            .chunks_exact(2 * HISTORY)
            .zip(future.chunks_exact(2 * FUTURE))
            .map(|(history, future)| RawPlayer {
                history: history.to_vec(),
                future: future.to_vec(),
            })
            .collect())
    })
}

fn list_values<'a>(
    batch: &'a RecordBatch,
    name: &str,
    width: usize,
) -> Result<&'a [f32], DecodeError> {
    let list = column::<FixedSizeListArray>(batch, name)?;
    reject_nulls(list, name)?;
    if list.value_length() as usize != width {
        return Err(DecodeError::new(format!(
            "holds lists of {} values, expected {width}",
            list.value_length()
        ))
        .in_column(name));
    }
    let values = list
        .values()
        .as_any()
        .downcast_ref::<Float32Array>()
        .ok_or_else(|| DecodeError::new("list items are not f32").in_column(name))?;
    reject_nulls(values, name)?;
    let start = list.offset() * width;
    Ok(&values.values()[start..start + list.len() * width])
}

/// The cached preprocessing: move each player into its own frame.
pub fn agent_frame()
-> FnTransform<impl Fn(RawPlayer) -> Result<Sample, std::convert::Infallible> + Send + Sync> {
    transform_fn("agent-frame", 1, |player: RawPlayer| {
        let last = HISTORY - 1;
        let (ox, oy) = (player.history[2 * last], player.history[2 * last + 1]);
        let (dx, dy) = (
            ox - player.history[2 * last - 2],
            oy - player.history[2 * last - 1],
        );
        let norm = (dx * dx + dy * dy).sqrt();
        let (cos, sin) = if norm > 1e-4 {
            (dx / norm, dy / norm)
        } else {
            (1.0, 0.0)
        };
        let to_frame = |points: &[f32]| -> Vec<f32> {
            points
                .chunks_exact(2)
                .flat_map(|p| {
                    let (x, y) = (p[0] - ox, p[1] - oy);
                    [x * cos + y * sin, -x * sin + y * cos]
                })
                .collect()
        };
        Ok(Sample {
            history: to_frame(&player.history),
            future: to_frame(&player.future),
        })
    })
}
