//! Settings from a command's flags given as data (the Python package's
//! `longread.train(..., lr=2e-5)`): the command line's own parser, defaults, checks and
//! "given" bookkeeping, so that every front accepts and refuses the same flags: `train`
//! ([`TrainSpec`]), `init` ([`InitSpec`]), `pretrain` ([`PretrainSpec`]) and `tokenizer train`
//! ([`TokenizerSpec`]).

use clap::{Args, Command, FromArgMatches};

use crate::run::init::InitSpec;
use crate::run::kit::TokenizerSpec;
use crate::run::pretrain_run::PretrainSpec;
use crate::run::spec::TrainSpec;

/// Parses `flags` (`["--train", "t.jsonl", "--out", "m", "--freeze-base", ...]`, no program
/// name) as `longread train` does. The error is clap's message on one line, e.g.
/// "unexpected argument '--lrr' found".
pub fn spec_from_flags(flags: &[String]) -> Result<TrainSpec, String> {
    let (mut spec, given) = parse_flags::<TrainSpec>("train", flags)?;
    spec.given = given;
    Ok(spec)
}

/// Parses `flags` (`["--encoder", "dir", "--labels", "a,b", "--out", "m", ...]`) as
/// `longread init` does; errors as [`spec_from_flags`]'s.
pub fn init_spec_from_flags(flags: &[String]) -> Result<InitSpec, String> {
    let (mut spec, given) = parse_flags::<InitSpec>("init", flags)?;
    spec.given = given;
    Ok(spec)
}

/// Parses `flags` as `longread pretrain` does; errors as [`spec_from_flags`]'s.
pub fn pretrain_spec_from_flags(flags: &[String]) -> Result<PretrainSpec, String> {
    parse_flags::<PretrainSpec>("pretrain", flags).map(|(spec, _)| spec)
}

/// Parses `flags` as `longread tokenizer train` does; errors as [`spec_from_flags`]'s.
pub fn tokenizer_spec_from_flags(flags: &[String]) -> Result<TokenizerSpec, String> {
    parse_flags::<TokenizerSpec>("tokenizer train", flags).map(|(spec, _)| spec)
}

/// Parses `flags` as the subcommand `name` whose flags are `T`'s; returns the settings and the
/// ids of the flags given.
fn parse_flags<T: Args + FromArgMatches>(name: &'static str, flags: &[String]) -> Result<(T, Vec<String>), String> {
    let command = T::augment_args(Command::new(name).no_binary_name(true));
    // clap's message without its usage and help lines, on one line ("the following required
    // arguments were not provided: --labels <LABELS>").
    let one_line = |e: clap::Error| {
        let text = e.render().to_string();
        let lines = text.lines().map(str::trim).take_while(|l| !l.starts_with("Usage:") && !l.starts_with("tip:"));
        let message = lines.filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
        message.trim_start_matches("error: ").to_owned()
    };
    let matches = command.try_get_matches_from(flags).map_err(one_line)?;
    let spec = T::from_arg_matches(&matches).map_err(one_line)?;
    Ok((spec, flags_given(&matches)))
}

/// The ids of the flags in `matches` that were given rather than left at their defaults (see
/// [`TrainSpec::given`]).
pub fn flags_given(matches: &clap::ArgMatches) -> Vec<String> {
    matches
        .ids()
        .filter(|id| matches.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine))
        .map(|id| id.as_str().to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_parse_as_the_command_line_and_record_what_was_given() {
        let spec = spec_from_flags(&flags(&[
            "--train",
            "t.jsonl",
            "--out",
            "m",
            "--arch",
            "bow",
            "--c-values",
            "1",
            "--c-values",
            "10",
        ]))
        .unwrap();
        assert_eq!(spec.bow.c_values, [1.0, 10.0]);
        assert!(spec.given.contains(&"c_values".to_string()) && !spec.given.contains(&"lr".to_string()));
        let err = spec_from_flags(&flags(&["--train", "t.jsonl", "--out", "m", "--lrr", "1"])).unwrap_err();
        assert!(err.contains("--lrr"), "{err}");
        let err = spec_from_flags(&flags(&["--train", "t.jsonl", "--out", "m", "--epochs", "many"])).unwrap_err();
        assert!(err.contains("many") && err.contains("--epochs"), "{err}");
    }

    #[test]
    fn init_flags_parse_as_the_command_line_and_record_what_was_given() {
        let spec = init_spec_from_flags(&flags(&[
            "--encoder",
            "e",
            "--labels",
            "a,b",
            "--labels",
            "c",
            "--out",
            "m",
            "--attention-top-k",
            "3",
        ]))
        .unwrap();
        assert_eq!(spec.labels, ["a", "b", "c"]);
        assert_eq!((spec.attention_top_k, spec.stride, spec.seed), (3, 256, 42), "given and defaults");
        assert_eq!(spec.given.iter().filter(|g| g.as_str() == "attention_top_k").count(), 1);
        assert!(!spec.given.contains(&"stride".to_string()));
        let err = init_spec_from_flags(&flags(&["--encoder", "e", "--out", "m"])).unwrap_err();
        assert!(err.contains("--labels"), "{err}");
        let err =
            init_spec_from_flags(&flags(&["--encoder", "e", "--labels", "a,b", "--out", "m", "--pooling", "maxx"]))
                .unwrap_err();
        assert!(err.contains("maxx"), "{err}");
    }
}
