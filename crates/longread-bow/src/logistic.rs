//! L2-regularised logistic regression on sparse rows, as scikit-learn's
//! `LogisticRegression(penalty="l2", solver="lbfgs")` fits it: binomial for two classes (one
//! weight vector), multinomial (softmax, one vector per class) for more; the intercepts are
//! not penalised. Minimises C·Σ sᵢ·lossᵢ + ½‖W‖² (sᵢ: sample weights), here divided by C·Σ sᵢ
//! for better-scaled numbers (the same minimiser).

use std::sync::Mutex;

use argmin::core::{CostFunction, Executor, Gradient, State};
use argmin::solver::linesearch::MoreThuenteLineSearch;
use argmin::solver::quasinewton::LBFGS;
use rayon::prelude::*;

use crate::error::{BowError, Result};
use crate::sparse::SparseRow;

/// A fitted model: `outputs` weight rows (1 for two classes, else one per class) over
/// `features` columns, and one intercept per row.
#[derive(Debug, Clone, PartialEq)]
pub struct LogisticRegression {
    /// Number of classes.
    pub classes: usize,
    /// Number of feature columns.
    pub features: usize,
    /// `[outputs, features]`, row-major.
    pub weights: Vec<f64>,
    /// `[outputs]`.
    pub intercepts: Vec<f64>,
}

/// Training documents of a fit: TF-IDF rows, class ids and sample weights.
#[derive(Debug, Clone, Copy)]
pub struct Data<'a> {
    /// One row per document.
    pub rows: &'a [SparseRow],
    /// Class ids, `< classes`.
    pub labels: &'a [usize],
    /// Weight of each document in the loss.
    pub sample_weights: &'a [f64],
    /// Number of classes.
    pub classes: usize,
    /// Number of feature columns.
    pub features: usize,
}

/// How the solver runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Solver {
    /// Most L-BFGS iterations.
    pub max_iters: u64,
    /// Stop when the gradient's norm is below this.
    pub tolerance: f64,
}

impl Default for Solver {
    fn default() -> Self {
        Self { max_iters: 1000, tolerance: 1e-6 }
    }
}

impl LogisticRegression {
    /// Rows of weights: 1 for a binary problem, else one per class.
    fn outputs(classes: usize) -> usize {
        if classes == 2 {
            1
        } else {
            classes
        }
    }

    /// Fits on `data` with inverse regularisation strength `c`; `start` (same shape)
    /// warm-starts the solver, e.g. from the fit at a smaller C.
    pub fn fit(data: Data, c: f64, start: Option<&Self>, solver: Solver) -> Result<Self> {
        let Data { rows, labels, sample_weights, classes, features } = data;
        if rows.is_empty() || rows.len() != labels.len() || rows.len() != sample_weights.len() {
            return Err(BowError::InvalidInput(format!(
                "logistic regression needs one label and weight per document ({} documents, {} labels, {} weights)",
                rows.len(),
                labels.len(),
                sample_weights.len()
            )));
        }
        if classes < 2 || labels.iter().any(|&l| l >= classes) {
            return Err(BowError::InvalidInput(format!(
                "labels must be class ids below {classes} (at least 2 classes)"
            )));
        }
        if !(c.is_finite() && c > 0.0) {
            return Err(BowError::InvalidInput(format!("C {c}: must be a number above 0")));
        }
        let outputs = Self::outputs(classes);
        let total_weight: f64 = sample_weights.iter().sum();
        let problem = Objective {
            rows,
            labels,
            sample_weights,
            outputs,
            features,
            scale: 1.0 / total_weight,
            l2: 1.0 / (c * total_weight),
            last: Mutex::new(None),
        };
        let init = match start {
            Some(s) if s.classes == classes && s.features == features => {
                [s.weights.clone(), s.intercepts.clone()].concat()
            }
            _ => vec![0.0; outputs * (features + 1)],
        };
        let lbfgs = LBFGS::new(MoreThuenteLineSearch::new(), 10)
            .with_tolerance_grad(solver.tolerance)
            .and_then(|s| s.with_tolerance_cost(0.0))
            .map_err(|e| BowError::Solver(e.to_string()))?;
        let result = Executor::new(problem, lbfgs)
            .configure(|state| state.param(init).max_iters(solver.max_iters))
            .run()
            .map_err(|e| BowError::Solver(e.to_string()))?;
        let best = result.state().get_best_param().cloned().ok_or_else(|| BowError::Solver("no solution".into()))?;
        let split = outputs * features;
        Ok(Self { classes, features, weights: best[..split].to_vec(), intercepts: best[split..].to_vec() })
    }

    /// Class logits of a row, whose softmax is [`Self::probabilities`]: for two classes
    /// `[0, w·x + b]`.
    pub fn logits(&self, row: &SparseRow) -> Vec<f64> {
        let z = linear(&self.weights, &self.intercepts, self.features, row);
        if self.classes == 2 {
            vec![0.0, z[0]]
        } else {
            z
        }
    }

    /// `w·x + b` of every weight row (one per label of a one-vs-rest model).
    pub fn decision(&self, row: &SparseRow) -> Vec<f64> {
        linear(&self.weights, &self.intercepts, self.features, row)
    }

    /// Class probabilities of a row.
    pub fn probabilities(&self, row: &SparseRow) -> Vec<f64> {
        softmax(&self.logits(row))
    }
}

/// `W x + b` for every output row.
fn linear(weights: &[f64], intercepts: &[f64], features: usize, row: &SparseRow) -> Vec<f64> {
    intercepts.iter().enumerate().map(|(k, b)| row.dot(&weights[k * features..(k + 1) * features]) + b).collect()
}

/// Index of the largest value (the first on ties).
pub fn argmax(v: &[f64]) -> usize {
    v.iter().enumerate().fold(0, |best, (i, &x)| if x > v[best] { i } else { best })
}

/// `ln softmax(z)`, stable.
pub fn log_softmax(z: &[f64]) -> Vec<f64> {
    let max = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let lse = max + z.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
    z.iter().map(|v| v - lse).collect()
}

/// The logistic function, stable for large |z|.
pub fn sigmoid(z: f64) -> f64 {
    if z >= 0.0 {
        1.0 / (1.0 + (-z).exp())
    } else {
        let e = z.exp();
        e / (1.0 + e)
    }
}

/// Softmax, stable.
pub fn softmax(z: &[f64]) -> Vec<f64> {
    let max = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = z.iter().map(|v| (v - max).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.iter().map(|v| v / sum).collect()
}

/// The scaled objective and its gradient; the last pair is kept because L-BFGS asks for the
/// cost and the gradient of the same point one after the other.
struct Objective<'a> {
    rows: &'a [SparseRow],
    labels: &'a [usize],
    sample_weights: &'a [f64],
    outputs: usize,
    features: usize,
    /// 1 / Σ sᵢ.
    scale: f64,
    /// 1 / (C Σ sᵢ).
    l2: f64,
    last: Mutex<Option<Point>>,
}

/// A parameter vector with its cost and gradient.
struct Point {
    at: Vec<f64>,
    cost: f64,
    gradient: Vec<f64>,
}

impl Objective<'_> {
    fn evaluate(&self, p: &[f64]) -> (f64, Vec<f64>) {
        if let Ok(last) = self.last.lock() {
            if let Some(point) = last.as_ref().filter(|point| point.at.as_slice() == p) {
                return (point.cost, point.gradient.clone());
            }
        }
        let (f, k) = (self.features, self.outputs);
        let (weights, intercepts) = p.split_at(k * f);
        let threads = rayon::current_num_threads().max(1);
        let per = self.rows.len().div_ceil(threads).max(1);
        let idx: Vec<usize> = (0..self.rows.len()).collect();
        let (mut loss, mut grad) = idx
            .par_chunks(per)
            .map(|part| {
                let mut grad = vec![0.0; p.len()];
                let mut loss = 0.0;
                for &i in part {
                    let row = &self.rows[i];
                    let s = self.sample_weights[i] * self.scale;
                    let z = linear(weights, intercepts, f, row);
                    let y = self.labels[i];
                    let dz: Vec<f64> = if k == 1 {
                        let t = if y == 1 { 1.0 } else { 0.0 };
                        // log(1 + e^z) − t·z, stable.
                        loss += s * (z[0].max(0.0) + (-z[0].abs()).exp().ln_1p() - t * z[0]);
                        vec![1.0 / (1.0 + (-z[0]).exp()) - t]
                    } else {
                        let max = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                        let lse = max + z.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
                        loss += s * (lse - z[y]);
                        z.iter().enumerate().map(|(c, v)| (v - lse).exp() - if c == y { 1.0 } else { 0.0 }).collect()
                    };
                    for (c, d) in dz.iter().enumerate() {
                        row.add_scaled_to(s * d, &mut grad[c * f..(c + 1) * f]);
                        grad[k * f + c] += s * d;
                    }
                }
                (loss, grad)
            })
            .reduce(
                || (0.0, vec![0.0; p.len()]),
                |(la, mut ga), (lb, gb)| {
                    ga.iter_mut().zip(&gb).for_each(|(a, b)| *a += b);
                    (la + lb, ga)
                },
            );
        for (g, w) in grad[..k * f].iter_mut().zip(weights) {
            *g += self.l2 * w;
        }
        loss += 0.5 * self.l2 * weights.iter().map(|w| w * w).sum::<f64>();
        if let Ok(mut last) = self.last.lock() {
            *last = Some(Point { at: p.to_vec(), cost: loss, gradient: grad.clone() });
        }
        (loss, grad)
    }
}

impl CostFunction for Objective<'_> {
    type Param = Vec<f64>;
    type Output = f64;

    fn cost(&self, p: &Self::Param) -> std::result::Result<f64, argmin::core::Error> {
        Ok(self.evaluate(p).0)
    }
}

impl Gradient for Objective<'_> {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;

    fn gradient(&self, p: &Self::Param) -> std::result::Result<Vec<f64>, argmin::core::Error> {
        Ok(self.evaluate(p).1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_is_the_log_of_softmax() {
        let z = [0.0, 2.0, -1.0];
        for (l, p) in log_softmax(&z).iter().zip(softmax(&z)) {
            assert!((l.exp() - p).abs() < 1e-12);
        }
        // Stable for large logits.
        assert!(log_softmax(&[1000.0, 0.0])[1].is_finite());
    }

    fn row(pairs: &[(u32, f64)]) -> SparseRow {
        SparseRow { indices: pairs.iter().map(|p| p.0).collect(), values: pairs.iter().map(|p| p.1).collect() }
    }

    #[test]
    fn the_gradient_matches_finite_differences() {
        let rows = vec![row(&[(0, 1.0), (2, 0.5)]), row(&[(1, 0.7)]), row(&[(0, 0.2), (1, 0.3), (2, 0.9)])];
        for (classes, labels) in [(2, vec![0, 1, 1]), (3, vec![0, 1, 2])] {
            let outputs = LogisticRegression::outputs(classes);
            let problem = Objective {
                rows: &rows,
                labels: &labels,
                sample_weights: &[1.0, 2.0, 0.5],
                outputs,
                features: 3,
                scale: 1.0 / 3.5,
                l2: 0.1,
                last: Mutex::new(None),
            };
            let p: Vec<f64> = (0..outputs * 4).map(|i| 0.1 * i as f64 - 0.3).collect();
            let (_, grad) = problem.evaluate(&p);
            for i in 0..p.len() {
                let (mut up, mut down) = (p.clone(), p.clone());
                up[i] += 1e-6;
                down[i] -= 1e-6;
                let numeric = (problem.evaluate(&up).0 - problem.evaluate(&down).0) / 2e-6;
                assert!((numeric - grad[i]).abs() < 1e-7, "{classes} classes, parameter {i}: {numeric} vs {}", grad[i]);
            }
        }
    }

    #[test]
    fn a_separable_problem_is_learned_and_the_penalty_bounds_the_weights() {
        let rows = vec![row(&[(0, 1.0)]), row(&[(1, 1.0)]), row(&[(0, 0.9), (2, 0.1)]), row(&[(1, 0.8), (2, 0.2)])];
        let labels = [0, 1, 0, 1];
        let data = Data { rows: &rows, labels: &labels, sample_weights: &[1.0; 4], classes: 2, features: 3 };
        let fit = |c| LogisticRegression::fit(data, c, None, Solver::default()).unwrap();
        let (weak, strong) = (fit(0.01), fit(100.0));
        for (r, &l) in rows.iter().zip(&labels) {
            assert!(strong.probabilities(r)[l] > 0.9);
        }
        let norm = |m: &LogisticRegression| m.weights.iter().map(|w| w * w).sum::<f64>();
        assert!(norm(&weak) < norm(&strong) / 100.0);
    }

    #[test]
    fn bad_input_is_refused() {
        let rows = vec![row(&[(0, 1.0)])];
        let fit = |labels: &[usize], c| {
            let data = Data { rows: &rows, labels, sample_weights: &[1.0], classes: 2, features: 1 };
            LogisticRegression::fit(data, c, None, Solver::default())
        };
        assert!(fit(&[2], 1.0).is_err());
        assert!(fit(&[0], 0.0).is_err());
        assert!(fit(&[0, 1], 1.0).is_err());
    }
}
