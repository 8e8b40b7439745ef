//! Gradual unfreezing (Howard & Ruder 2018, ULMFiT): what trains changes with the epoch, e.g.
//! `0:head,3:top6,6:all` trains the head alone for 3 epochs, then the top 6 layers too, then
//! the whole encoder from epoch 6 on (epochs counted from 0 here: `E:` applies once E epochs
//! are done). Each phase trains a superset of the previous one.

use crate::error::{Result, TrainError};
use crate::groups::Freezing;

/// What trains in a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unfreeze {
    /// Pooling and head only (the encoder is frozen).
    Head,
    /// The top N encoder layers, pooling and head.
    Top(usize),
    /// Every encoder layer (the embeddings follow `--train-embeddings`).
    All,
}

/// Phases by the epoch (0-based) at which they start.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UnfreezeSchedule(Vec<(usize, Unfreeze)>);

impl UnfreezeSchedule {
    /// Parses `E:WHAT[,E:WHAT...]` with WHAT one of `head`, `topN`, `all`; epochs must increase
    /// and each phase must train at least what the previous one did.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |why: String| TrainError::InvalidSetting(format!("--unfreeze `{text}`: {why}"));
        let mut phases: Vec<(usize, Unfreeze)> = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (epoch, what) =
                part.split_once(':').ok_or_else(|| bad(format!("`{part}` is not EPOCH:WHAT (e.g. 3:top6)")))?;
            let epoch: usize = epoch.trim().parse().map_err(|_| bad(format!("`{epoch}` is not an epoch number")))?;
            let what = match what.trim() {
                "head" => Unfreeze::Head,
                "all" => Unfreeze::All,
                w => match w.strip_prefix("top").map(str::parse::<usize>) {
                    Some(Ok(n)) if n > 0 => Unfreeze::Top(n),
                    _ => return Err(bad(format!("`{w}` is not head, topN (N ≥ 1) or all"))),
                },
            };
            if let Some(&(prev_epoch, prev)) = phases.last() {
                if epoch <= prev_epoch {
                    return Err(bad("epochs must increase".into()));
                }
                if rank(what) < rank(prev) {
                    return Err(bad(format!("`{part}` would freeze again what an earlier phase trains")));
                }
            }
            phases.push((epoch, what));
        }
        if phases.is_empty() {
            return Err(bad("no phases given".into()));
        }
        Ok(Self(phases))
    }

    /// Refuses a `topN` phase above the encoder's `num_layers` (it would have trained every
    /// layer, as `all` says plainly, and a typo such as `top24` for `top4` went unnoticed).
    pub fn check_layers(&self, num_layers: usize) -> Result<()> {
        match self.0.iter().find(|(_, what)| matches!(what, Unfreeze::Top(n) if *n > num_layers)) {
            Some((epoch, Unfreeze::Top(n))) => Err(TrainError::InvalidSetting(format!(
                "--unfreeze {epoch}:top{n}: the encoder has {num_layers} layers (`all` trains every one)"
            ))),
            _ => Ok(()),
        }
    }

    /// The phases as parsed.
    pub fn phases(&self) -> &[(usize, Unfreeze)] {
        &self.0
    }

    /// What is frozen during the epoch that starts after `done` completed epochs: the last
    /// phase that has started, or `base` (the run's flags) before the first one.
    pub fn freezing_at(&self, done: usize, base: Freezing, num_layers: usize) -> Freezing {
        match self.0.iter().rev().find(|(e, _)| *e <= done) {
            None => base,
            Some((_, what)) => apply(*what, base, num_layers),
        }
    }
}

/// `what` on top of the run's embedding setting.
fn apply(what: Unfreeze, base: Freezing, num_layers: usize) -> Freezing {
    let keep = Freezing { train_embeddings: base.train_embeddings, ..Freezing::default() };
    match what {
        Unfreeze::Head => Freezing { freeze_base: true, ..keep },
        Unfreeze::Top(n) => Freezing { freeze_bottom: num_layers.saturating_sub(n), ..keep },
        Unfreeze::All => keep,
    }
}

/// Orders phases by how much they train (independent of the model's depth).
fn rank(what: Unfreeze) -> usize {
    match what {
        Unfreeze::Head => 0,
        Unfreeze::Top(n) => n,
        Unfreeze::All => usize::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_top_phase_above_the_encoders_layers_is_refused() {
        let s = UnfreezeSchedule::parse("0:head,2:top6,4:all").unwrap();
        assert!(s.check_layers(6).is_ok() && s.check_layers(12).is_ok());
        let err = s.check_layers(4).unwrap_err().to_string();
        assert!(err.contains("--unfreeze 2:top6: the encoder has 4 layers"), "{err}");
    }

    #[test]
    fn parses_the_issue_example_and_picks_phases_by_epoch() {
        let s = UnfreezeSchedule::parse("0:head,3:top6,6:all").unwrap();
        let base = Freezing { freeze_bottom: 2, ..Freezing::default() };
        assert!(s.freezing_at(0, base, 12).freeze_base);
        assert!(s.freezing_at(2, base, 12).freeze_base);
        assert_eq!(s.freezing_at(3, base, 12), Freezing { freeze_bottom: 6, ..Freezing::default() });
        assert_eq!(s.freezing_at(5, base, 12).freeze_bottom, 6);
        assert_eq!(s.freezing_at(6, base, 12), Freezing::default());
        // Before the first phase the run's own flags apply.
        let late = UnfreezeSchedule::parse("2:all").unwrap();
        assert_eq!(late.freezing_at(1, base, 12), base);
        // top N beyond the depth trains every layer.
        assert_eq!(s.freezing_at(4, base, 4).freeze_bottom, 0);
    }

    #[test]
    fn bad_schedules_say_why() {
        for (text, why) in [
            ("", "no phases"),
            ("3", "EPOCH:WHAT"),
            ("x:all", "epoch number"),
            ("0:bottom2", "head, topN"),
            ("0:top0", "head, topN"),
            ("2:head,1:all", "increase"),
            ("0:all,2:top3", "freeze again"),
        ] {
            let err = UnfreezeSchedule::parse(text).unwrap_err().to_string();
            assert!(err.contains(why), "{text}: {err}");
        }
    }
}
