//! The one batch planner: which units of work (an encoder's chunks, a HAN's documents) run
//! together. `predict`, the server's queue, Python and the trainer all plan with it; inference
//! also splits where padding would waste work ([`Split::Padding`]), while training keeps to the
//! budget alone ([`Split::Budget`]): a frozen prefix cached in one batching and recomputed in
//! another must pad alike, since AdamW turns the last-bit differences of another padding into
//! visible weight differences within a few steps.

/// A padded batch wastes the work of `longest − length` tokens per sequence: a batch is
/// closed, longest first, where a unit is shorter than this fraction of the batch's longest.
pub const SPLIT_BELOW: f64 = 0.75;

/// Where a batch closes besides the token budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Only at the budget (training).
    Budget,
    /// Also where a unit is shorter than [`SPLIT_BELOW`] of the batch's longest (inference).
    Padding,
}

/// What the planner knows of a unit: which model encodes it (`lane`: units of different lanes
/// never share a batch, e.g. an ensemble's members) and what it costs (its tokens: a batch
/// pads every unit to its longest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnitKey {
    /// The model that encodes the unit.
    pub lane: usize,
    /// Its padded cost in tokens.
    pub cost: usize,
}

/// Indices of `units` in batches: by lane, longest first; a batch closes when its padded size
/// (`count × longest`) would exceed `max_batch_tokens` (at least one unit per batch) or, with
/// [`Split::Padding`], when the next unit is shorter than [`SPLIT_BELOW`] of its longest. Ties
/// keep the input order.
pub fn plan_batches(units: &[UnitKey], max_batch_tokens: usize, split: Split) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..units.len()).collect();
    order.sort_by_key(|&i| (units[i].lane, std::cmp::Reverse(units[i].cost)));
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    for i in order {
        if let Some(&first) = current.first() {
            let (head, unit) = (units[first], units[i]);
            let over_budget = (current.len() + 1) * head.cost > max_batch_tokens;
            let too_short = split == Split::Padding && (unit.cost as f64) < SPLIT_BELOW * head.cost as f64;
            if unit.lane != head.lane || over_budget || too_short {
                batches.push(std::mem::take(&mut current));
            }
        }
        current.push(i);
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

/// [`plan_batches`] for units of one lane with these costs.
pub fn plan_by_cost(costs: impl IntoIterator<Item = usize>, max_batch_tokens: usize, split: Split) -> Vec<Vec<usize>> {
    let keys: Vec<UnitKey> = costs.into_iter().map(|cost| UnitKey { lane: 0, cost }).collect();
    plan_batches(&keys, max_batch_tokens, split)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_respect_the_token_budget() {
        let costs = [512, 512, 400, 400, 400, 400];
        for split in [Split::Budget, Split::Padding] {
            assert_eq!(plan_by_cost(costs, 1024, split), vec![vec![0, 1], vec![2, 3], vec![4, 5]]);
            // A unit longer than the budget still gets a batch of its own.
            assert_eq!(plan_by_cost([512, 512], 100, split), vec![vec![0], vec![1]]);
            assert_eq!(plan_by_cost([], 100, split), Vec::<Vec<usize>>::new());
        }
        // Training pads within the budget.
        assert_eq!(
            plan_by_cost([512, 512, 300, 300, 300, 20], 1024, Split::Budget),
            [vec![0, 1], vec![2, 3, 4], vec![5]]
        );
    }

    #[test]
    fn lengths_split_where_padding_would_waste_a_quarter() {
        // Longest first; 380 < 0.75 × 512 closes the first batch, 100 the second.
        assert_eq!(plan_by_cost([100, 512, 380, 400], usize::MAX, Split::Padding), vec![vec![1, 3], vec![2], vec![0]]);
        assert_eq!(plan_by_cost([100, 512, 380, 400], usize::MAX, Split::Budget), vec![vec![1, 3, 2, 0]]);
    }

    #[test]
    fn lanes_never_share_a_batch() {
        let keys = [
            UnitKey { lane: 1, cost: 512 },
            UnitKey { lane: 0, cost: 500 },
            UnitKey { lane: 1, cost: 510 },
            UnitKey { lane: 0, cost: 64 },
        ];
        assert_eq!(plan_batches(&keys, 4096, Split::Padding), vec![vec![1], vec![3], vec![0, 2]]);
        assert_eq!(plan_batches(&keys, 4096, Split::Budget), vec![vec![1, 3], vec![0, 2]]);
    }
}
