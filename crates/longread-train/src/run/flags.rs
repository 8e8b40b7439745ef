//! A [`TrainSpec`] from `longread train`'s flags given as data (the Python package's
//! `longread.train(..., lr=2e-5)`): the command line's own parser, defaults, checks and
//! "given" bookkeeping, so that every front accepts and refuses the same flags.

use clap::{Args, Command, FromArgMatches};

use crate::run::spec::TrainSpec;

/// Parses `flags` (`["--train", "t.jsonl", "--out", "m", "--freeze-base", ...]`, no program
/// name) as `longread train` does. The error is clap's first line, e.g. "unexpected argument
/// '--lrr' found".
pub fn spec_from_flags(flags: &[String]) -> Result<TrainSpec, String> {
    let command = TrainSpec::augment_args(Command::new("train").no_binary_name(true));
    let first_line = |e: clap::Error| {
        let text = e.render().to_string();
        text.lines().next().unwrap_or_default().trim_start_matches("error: ").to_owned()
    };
    let matches = command.try_get_matches_from(flags).map_err(first_line)?;
    let mut spec = TrainSpec::from_arg_matches(&matches).map_err(first_line)?;
    spec.given = flags_given(&matches);
    Ok(spec)
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
}
