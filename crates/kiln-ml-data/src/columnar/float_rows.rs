//! Columns of floats laid side by side into one row-major matrix.

/// Rows per block of the plain-column transposition: a block's values of one column are read
/// together and written `width` apart, within a few cache lines of the output. With it
/// `float_matrix` is 13% faster than a column at a time over every row (`cargo bench -p
/// kiln-ml-data --bench columnar_collate`, docs/performance.md).
const BLOCK_ROWS: usize = 8;

/// `parts` side by side, row by row: part `(values, width)` holds `width` floats per row (1
/// for a plain column, the list width for a fixed-size list column), each part holds `rows`
/// rows, and the matrix has `rows` rows of the parts' widths summed.
pub(crate) fn float_rows(parts: &[(&[f32], usize)], rows: usize) -> Vec<f32> {
    let width: usize = parts.iter().map(|(_, part_width)| part_width).sum();
    let mut matrix = vec![0.0; rows * width];
    if matrix.is_empty() {
        return matrix;
    }
    if parts.iter().all(|&(_, part_width)| part_width == 1) {
        plain_columns(parts, &mut matrix);
        return matrix;
    }
    // Part by part: each part's values are read once, in order, and land `width` apart.
    let mut first = 0;
    for &(values, part_width) in parts {
        let values = &values[..rows * part_width];
        if part_width == 1 {
            for (slot, &value) in matrix[first..].iter_mut().step_by(width).zip(values) {
                *slot = value;
            }
        } else {
            for (row, element) in values.chunks_exact(part_width).enumerate() {
                let start = row * width + first;
                matrix[start..start + part_width].copy_from_slice(element);
            }
        }
        first += part_width;
    }
    matrix
}

/// Plain columns (parts of width 1, each holding at least the matrix's rows) into `matrix`, in
/// blocks of [`BLOCK_ROWS`] rows.
fn plain_columns(columns: &[(&[f32], usize)], matrix: &mut [f32]) {
    let width = columns.len();
    let rows = matrix.len() / width;
    let whole = rows / BLOCK_ROWS * BLOCK_ROWS;
    let (blocks, tail) = matrix.split_at_mut(whole * width);
    for (block, out) in blocks.chunks_exact_mut(BLOCK_ROWS * width).enumerate() {
        let start = block * BLOCK_ROWS;
        for (column, &(values, _)) in columns.iter().enumerate() {
            // A fixed-length window: the compiler unrolls the block and drops the bounds checks.
            let values: &[f32; BLOCK_ROWS] = values[start..start + BLOCK_ROWS]
                .try_into()
                .expect("a block's rows are in every column");
            for (row, &value) in values.iter().enumerate() {
                out[row * width + column] = value;
            }
        }
    }
    for (row, out) in tail.chunks_exact_mut(width).enumerate() {
        for (slot, &(values, _)) in out.iter_mut().zip(columns) {
            *slot = values[whole + row];
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The matrix element by element: row `r` is every part's row `r`, in part order.
    fn reference(parts: &[(Vec<f32>, usize)], rows: usize) -> Vec<f32> {
        let mut matrix = Vec::new();
        for row in 0..rows {
            for (values, width) in parts {
                matrix.extend_from_slice(&values[row * width..(row + 1) * width]);
            }
        }
        matrix
    }

    proptest! {
        #[test]
        fn parts_land_side_by_side_in_every_row(
            rows in 0usize..40,
            widths in proptest::collection::vec(prop_oneof![4 => Just(1usize), 1 => 2usize..4], 1..6),
            extra in 0usize..3,
        ) {
            // Distinct values, and parts longer than the rows (a sliced column's buffer).
            let parts: Vec<(Vec<f32>, usize)> = widths
                .iter()
                .enumerate()
                .map(|(part, &width)| {
                    let values = (0..(rows + extra) * width)
                        .map(|value| (part * 1000 + value) as f32)
                        .collect();
                    (values, width)
                })
                .collect();
            let borrowed: Vec<(&[f32], usize)> =
                parts.iter().map(|(values, width)| (values.as_slice(), *width)).collect();
            prop_assert_eq!(float_rows(&borrowed, rows), reference(&parts, rows));
        }
    }

    #[test]
    fn no_rows_make_an_empty_matrix() {
        let column = [1.0f32, 2.0];
        let list = [1.0f32, 2.0, 3.0, 4.0];
        for parts in [
            vec![(&column[..], 1), (&column[..], 1)],
            vec![(&column[..], 1), (&list[..], 2)],
        ] {
            assert!(float_rows(&parts, 0).is_empty());
        }
    }

    #[test]
    fn plain_columns_fill_whole_blocks_and_the_tail() {
        // 19 rows: two blocks of 8 and a tail of 3.
        let columns: Vec<Vec<f32>> = (0..3)
            .map(|column| (0..19).map(|row| (row * 10 + column) as f32).collect())
            .collect();
        let parts: Vec<(&[f32], usize)> = columns.iter().map(|c| (c.as_slice(), 1)).collect();
        let matrix = float_rows(&parts, 19);
        let expected: Vec<f32> = (0..19 * 3)
            .map(|at| ((at / 3) * 10 + at % 3) as f32)
            .collect();
        assert_eq!(matrix, expected);
    }
}
