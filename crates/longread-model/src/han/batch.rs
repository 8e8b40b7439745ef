//! Batches of word-id grids: the documents' `[doc_size, sent_size]` grids stacked and cut to
//! the rows and columns some document of the batch uses, so that padding costs nothing
//! (the model's outputs do not depend on padding).

use candle_core::{Device, Tensor};
use longread_text::words::{GridShape, PAD};

use crate::error::Result;

/// Stacks `grids` (row-major `[shape.doc_size, shape.sent_size]` ids) into one batch, keeping
/// only the sentences and word positions some grid of the batch fills (at least one of each).
///
/// # Shapes
/// `grids[i]: doc_size · sent_size` → `[grids.len(), d ≤ doc_size, w ≤ sent_size]` (u32)
pub fn grid_batch(grids: &[&[u32]], shape: GridShape, device: &Device) -> Result<Tensor> {
    let (rows, cols) = used_extent(grids, shape);
    let mut ids = Vec::with_capacity(grids.len() * rows * cols);
    for grid in grids {
        for row in grid.chunks(shape.sent_size).take(rows) {
            ids.extend_from_slice(&row[..cols]);
        }
    }
    Ok(Tensor::from_vec(ids, (grids.len(), rows, cols), device)?)
}

/// Rows and columns up to the last non-padding id of any grid (at least 1 × 1).
fn used_extent(grids: &[&[u32]], shape: GridShape) -> (usize, usize) {
    let (mut rows, mut cols) = (1, 1);
    for grid in grids {
        for (r, row) in grid.chunks(shape.sent_size).enumerate() {
            if let Some(last) = row.iter().rposition(|&id| id != PAD) {
                rows = rows.max(r + 1);
                cols = cols.max(last + 1);
            }
        }
    }
    (rows, cols)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_cut_to_the_used_rows_and_columns() {
        let shape = GridShape { doc_size: 3, sent_size: 4 };
        let a = [5, 6, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0];
        let b = [8, 9, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let t = grid_batch(&[&a, &b], shape, &Device::Cpu).unwrap();
        assert_eq!(t.dims(), &[2, 2, 3]);
        assert_eq!(
            t.to_vec3::<u32>().unwrap(),
            vec![vec![vec![5, 6, 0], vec![7, 0, 0]], vec![vec![8, 9, 10], vec![0; 3]]]
        );
        let empty = [0u32; 12];
        assert_eq!(grid_batch(&[&empty], shape, &Device::Cpu).unwrap().dims(), &[1, 1, 1]);
    }
}
