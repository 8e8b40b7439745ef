//! A sparse feature row.

/// Non-zero features of one document: column indices (ascending) and values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SparseRow {
    /// Columns, ascending.
    pub indices: Vec<u32>,
    /// Values, one per column.
    pub values: Vec<f64>,
}

impl SparseRow {
    /// Dot product with the dense vector `w` (indexed by column).
    pub fn dot(&self, w: &[f64]) -> f64 {
        self.indices.iter().zip(&self.values).map(|(&i, &v)| w[i as usize] * v).sum()
    }

    /// `out += scale · self` (dense `out`, indexed by column).
    pub fn add_scaled_to(&self, scale: f64, out: &mut [f64]) {
        for (&i, &v) in self.indices.iter().zip(&self.values) {
            out[i as usize] += scale * v;
        }
    }
}
