//! A CPU-heavy transform standing in for graph construction, and the batch digest that compares
//! cached samples with fresh ones byte for byte.

use std::convert::Infallible;

use kiln_ml::cache::{BincodeCodec, Codec};
use kiln_ml::core::{Fingerprint, Transform};
use kiln_ml::data::{Collate, collate_fn};
use serde::{Deserialize, Serialize};

use kiln_ml_examples::shuffle_dataset::Row;

/// The graph built from an event: 8 nodes, k-nearest-neighbour edges with weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Graph {
    pub id: i64,
    pub label: i64,
    pub nodes: Vec<[f32; 2]>,
    pub edges: Vec<[u8; 2]>,
    pub weights: Vec<f32>,
}

/// Stands in for graph construction: the 16 features as 8 points, `rounds` of Gaussian-kernel
/// smoothing over the dense graph, then each node's `neighbours` nearest nodes as edges.
#[derive(Debug, Clone, Copy)]
pub struct BuildGraph {
    pub rounds: u32,
    pub neighbours: usize,
}

impl Transform<Row> for BuildGraph {
    type Output = Graph;
    type Error = Infallible;

    fn apply(&self, row: Row) -> Result<Graph, Infallible> {
        let original: [[f32; 2]; 8] =
            std::array::from_fn(|i| [row.features[2 * i], row.features[2 * i + 1]]);
        let mut nodes = original;
        for _ in 0..self.rounds {
            let mut next = [[0.0f32; 2]; 8];
            for (i, out) in next.iter_mut().enumerate() {
                let (mut total, mut sum) = (0.0f32, [0.0f32; 2]);
                for node in &nodes {
                    let (dx, dy) = (nodes[i][0] - node[0], nodes[i][1] - node[1]);
                    let weight = (-(dx * dx + dy * dy)).exp();
                    total += weight;
                    sum[0] += weight * node[0];
                    sum[1] += weight * node[1];
                }
                *out = [
                    0.5 * original[i][0] + 0.5 * sum[0] / total,
                    0.5 * original[i][1] + 0.5 * sum[1] / total,
                ];
            }
            nodes = next;
        }
        let (mut edges, mut weights) = (Vec::new(), Vec::new());
        for i in 0..8 {
            let mut others: Vec<(f32, usize)> = (0..8)
                .filter(|&j| j != i)
                .map(|j| {
                    let (dx, dy) = (nodes[i][0] - nodes[j][0], nodes[i][1] - nodes[j][1]);
                    (dx * dx + dy * dy, j)
                })
                .collect();
            others.sort_by(|a, b| a.0.total_cmp(&b.0));
            for &(distance, j) in others.iter().take(self.neighbours) {
                edges.push([i as u8, j as u8]);
                weights.push((-distance).exp());
            }
        }
        Ok(Graph {
            id: row.id,
            label: row.label,
            nodes: nodes.to_vec(),
            edges,
            weights,
        })
    }

    fn fingerprint(&self) -> Fingerprint {
        Fingerprint::builder()
            .str("build-graph")
            .u64(1)
            .u64(u64::from(self.rounds))
            .u64(self.neighbours as u64)
            .finish()
    }
}

/// Hashes a batch of graphs as the cache encodes them, so epochs can be compared byte for byte.
pub fn digest_collate() -> impl Collate<Graph, Output = (usize, Fingerprint)> {
    collate_fn(|graphs: Vec<Graph>| {
        let mut bytes = Vec::new();
        for graph in &graphs {
            BincodeCodec
                .encode(graph, &mut bytes)
                .expect("a graph always encodes");
        }
        (graphs.len(), Fingerprint::of_bytes(&bytes))
    })
}
