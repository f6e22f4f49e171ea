//! Splitting a number of rows over files in proportion to weights, every file at least one row.

/// `rows` split over one file per weight, in proportion to the weights (rounded down), every
/// file holding at least one row; the sizes sum to `rows` exactly.
///
/// What rounding down leaves goes to the first file. When raising small files to one row
/// overshoots, the first file gives back what it can and then the largest files do. Needs at
/// least one row per file.
pub fn split_sizes(weights: &[f64], rows: u64) -> Vec<u64> {
    assert!(
        rows >= weights.len() as u64,
        "{rows} rows cannot give each of {} files one",
        weights.len()
    );
    let total: f64 = weights.iter().sum();
    let mut sizes: Vec<u64> = weights
        .iter()
        .map(|weight| ((weight / total) * rows as f64).floor().max(1.0) as u64)
        .collect();
    if sizes.is_empty() {
        return sizes;
    }
    let assigned: u64 = sizes.iter().sum();
    if assigned <= rows {
        sizes[0] += rows - assigned;
        return sizes;
    }
    let mut excess = assigned - rows;
    let from_first = excess.min(sizes[0] - 1);
    sizes[0] -= from_first;
    excess -= from_first;
    while excess > 0 {
        let largest = (0..sizes.len())
            .max_by_key(|&index| sizes[index])
            .expect("files are not empty here");
        sizes[largest] -= 1;
        excess -= 1;
    }
    sizes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_sum_to_the_rows_and_keep_one_row_per_file() {
        // Many tiny shares and one large: flooring lifts the tiny ones to one row each.
        let mut weights = vec![1.0; 47];
        weights.push(200.0);
        for rows in [48, 49, 60, 1000] {
            let sizes = split_sizes(&weights, rows);
            assert_eq!(sizes.iter().sum::<u64>(), rows, "{rows}");
            assert!(sizes.iter().all(|&size| size >= 1), "{rows}: {sizes:?}");
        }
        assert_eq!(split_sizes(&weights, 48), vec![1; 48]);
    }

    #[test]
    fn the_remainder_of_rounding_goes_to_the_first_file() {
        assert_eq!(split_sizes(&[1.0, 1.0, 1.0], 10), vec![4, 3, 3]);
        assert_eq!(split_sizes(&[], 0), Vec::<u64>::new());
    }
}
