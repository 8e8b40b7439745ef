//! Settings of a command given as data — the Python package's `longread.train(..., lr=2e-5)`
//! passes its keyword arguments as a JSON object ([`Settings`]) — read with the command
//! line's own parser, defaults, checks and "given" bookkeeping, so that every front accepts and
//! refuses the same settings: `train` ([`TrainSpec`]), `init` ([`InitSpec`]), `pretrain`
//! ([`PretrainSpec`]) and `tokenizer train` ([`TokenizerSpec`]).

use clap::{Args, Command, FromArgMatches};
use serde_json::Value;

use crate::run::init::InitSpec;
use crate::run::kit::TokenizerSpec;
use crate::run::pretrain_run::PretrainSpec;
use crate::run::spec::TrainSpec;

/// Settings as data: key `name` is flag `--name` (`_` or `-`); `true` sets a switch, `false`
/// and `null` leave a setting at its default, a list repeats the flag (`task=["a=x", "b=y"]`),
/// a string or a number is the value as the command line takes it (`labels="a,b"`,
/// `char_ngrams="2-5"`).
pub type Settings = serde_json::Map<String, Value>;

/// The command-line form of `settings` (in their order): `--name=value` (a value of its own
/// would read `-1` as a flag), `--name` for a switch; `train --config FILE.toml` reads its file
/// through it too.
pub fn settings_as_flags(settings: &Settings) -> Result<Vec<String>, String> {
    let mut flags = Vec::new();
    for (key, value) in settings {
        let flag = format!("--{}", key.replace('_', "-"));
        for value in values_of(value) {
            match value {
                Value::Bool(true) => flags.push(flag.clone()),
                Value::Bool(false) | Value::Null => {}
                Value::String(s) => flags.push(format!("{flag}={s}")),
                Value::Number(n) => flags.push(format!("{flag}={n}")),
                Value::Array(_) | Value::Object(_) => {
                    return Err(format!("`{key}` must be a string, number, boolean or a list of them"))
                }
            }
        }
    }
    Ok(flags)
}

/// A setting's values: a list's items (the flag repeated), or the one value.
fn values_of(value: &Value) -> Vec<&Value> {
    match value {
        Value::Array(items) => items.iter().collect(),
        one => vec![one],
    }
}

/// `longread train`'s settings from `settings` (see [`Settings`]). Errors name the settings by
/// their keys, as a caller passing data wrote them ("unknown setting `epoch` (did you mean
/// `epochs`?)", not clap's "unexpected argument '--epoch'").
pub fn spec_from_settings(settings: &Settings) -> Result<TrainSpec, String> {
    let (mut spec, given) = parse_settings::<TrainSpec>("train", settings)?;
    spec.given = given;
    Ok(spec)
}

/// `longread init`'s settings from `settings`; errors as [`spec_from_settings`]'s.
pub fn init_spec_from_settings(settings: &Settings) -> Result<InitSpec, String> {
    let (mut spec, given) = parse_settings::<InitSpec>("init", settings)?;
    spec.given = given;
    Ok(spec)
}

/// `longread pretrain`'s settings from `settings`; errors as [`spec_from_settings`]'s.
pub fn pretrain_spec_from_settings(settings: &Settings) -> Result<PretrainSpec, String> {
    parse_settings::<PretrainSpec>("pretrain", settings).map(|(spec, _)| spec)
}

/// `longread tokenizer train`'s settings from `settings`; errors as [`spec_from_settings`]'s.
pub fn tokenizer_spec_from_settings(settings: &Settings) -> Result<TokenizerSpec, String> {
    parse_settings::<TokenizerSpec>("tokenizer train", settings).map(|(spec, _)| spec)
}

/// Parses `settings` as the subcommand `name` whose flags are `T`'s, with errors in the
/// settings' terms (see [`spec_from_settings`]).
fn parse_settings<T: Args + FromArgMatches>(
    name: &'static str,
    settings: &Settings,
) -> Result<(T, Vec<String>), String> {
    let command = command_of::<T>(name);
    // A switch given a string or a number became "--switch VALUE", and clap then complained
    // of an unexpected argument VALUE; a flag with a value given `true` became a bare flag, and
    // clap's complaint read "`max_chunks` = "" is not valid (one of )".
    for (key, value) in settings {
        let long = key.replace('_', "-");
        let Some(arg) = command.get_arguments().find(|a| a.get_long() == Some(long.as_str()) && !a.is_positional())
        else {
            continue;
        };
        let values = values_of(value);
        if !arg.get_action().takes_values() && values.iter().any(|v| !matches!(v, Value::Bool(_) | Value::Null)) {
            return Err(format!("`{key}` is a switch: give true or false (found {value})"));
        }
        if arg.get_action().takes_values() && values.iter().any(|v| matches!(v, Value::Bool(true))) {
            return Err(format!("`{key}` takes a value, not true (false or null leaves it at its default)"));
        }
    }
    parse_with(command, &settings_as_flags(settings)?, in_settings_terms)
}

/// The flag a clap error names in its context: `--max-steps <MAX_STEPS>` (or `--max-steps=3`)
/// → `--max-steps`.
pub fn flag_named_by_clap(arg: &str) -> &str {
    arg.split([' ', '=']).next().unwrap_or(arg)
}

/// A flag as a setting's key: `--max-steps <MAX_STEPS>` → `max_steps`.
fn key_of(flag: &str) -> String {
    flag_named_by_clap(flag).trim_start_matches('-').replace('-', "_")
}

/// clap's error about flags made from settings, told in the settings' keys.
fn in_settings_terms(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let text = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => Some(v.join(", ")),
        _ => None,
    };
    let keys = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => vec![key_of(s)],
        Some(ContextValue::Strings(v)) => v.iter().map(|s| key_of(s)).collect(),
        _ => Vec::new(),
    };
    let quoted = |keys: Vec<String>| keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
    match e.kind() {
        ErrorKind::UnknownArgument => {
            let hint = match keys(ContextKind::SuggestedArg).first() {
                Some(k) => format!(" (did you mean `{k}`?)"),
                None => String::new(),
            };
            format!("unknown setting {}{hint}", quoted(keys(ContextKind::InvalidArg)))
        }
        ErrorKind::MissingRequiredArgument => format!("missing setting {}", quoted(keys(ContextKind::InvalidArg))),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation => {
            let value = text(ContextKind::InvalidValue).unwrap_or_default();
            let why = match (std::error::Error::source(e), text(ContextKind::ValidValue)) {
                (Some(reason), _) => format!(": {reason}"),
                (None, Some(valid)) => format!(" (one of {valid})"),
                (None, None) => String::new(),
            };
            format!("{} = {value:?} is not valid{why}", quoted(keys(ContextKind::InvalidArg)))
        }
        ErrorKind::ArgumentConflict => format!(
            "setting {} cannot be used with {}",
            quoted(keys(ContextKind::InvalidArg)),
            quoted(keys(ContextKind::PriorArg))
        ),
        _ => one_line(e),
    }
}

/// clap's message without its usage and help lines, on one line ("the following required
/// arguments were not provided: --labels <LABELS>").
fn one_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let lines = text.lines().map(str::trim).take_while(|l| !l.starts_with("Usage:") && !l.starts_with("tip:"));
    let message = lines.filter(|l| !l.is_empty() && !l.starts_with("For more information")).collect::<Vec<_>>();
    message.join(" ").trim_start_matches("error: ").to_owned()
}

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
    parse_with(command_of::<T>(name), flags, one_line)
}

/// The subcommand `name` whose flags are `T`'s, parsing flags without a program name.
fn command_of<T: Args>(name: &'static str) -> Command {
    T::augment_args(Command::new(name).no_binary_name(true))
}

/// Parses `flags` with `command` into `T` and the ids of the flags given; `describe` words
/// clap's errors.
fn parse_with<T: FromArgMatches>(
    command: Command,
    flags: &[String],
    describe: fn(&clap::Error) -> String,
) -> Result<(T, Vec<String>), String> {
    let matches = command.try_get_matches_from(flags).map_err(|e| describe(&e))?;
    let spec = T::from_arg_matches(&matches).map_err(|e| describe(&e))?;
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
    fn settings_as_data_are_the_flags_they_name() {
        let settings: Settings = serde_json::from_str(
            r#"{"train": "t.jsonl", "out": "m", "lr": 3e-5, "epochs": 2, "freeze_base": true, "no_cache": false,
                "head_lr": null, "task": ["a=x", "b=y"], "char-ngrams": "2-4", "arch": "hierarchical"}"#,
        )
        .unwrap();
        let spec = spec_from_settings(&settings).unwrap();
        assert_eq!((spec.training.lr, spec.training.epochs, spec.encoder.freeze_base), (Some(3e-5), Some(2), true));
        assert_eq!((spec.encoder.no_cache, spec.encoder.head_lr), (false, None), "false and null: the default");
        assert_eq!(spec.encoder.task, ["a=x", "b=y"], "a list repeats the flag");
        assert_eq!(spec.bow.char_ngrams, Some([2, 4]));
        let given = |id: &str| spec.given.iter().any(|g| g == id);
        assert!(given("lr") && given("freeze_base") && !given("no_cache") && !given("head_lr"));
        let nested: Settings = serde_json::from_str(r#"{"train": "t", "out": "m", "lr": {"a": 1}}"#).unwrap();
        assert!(spec_from_settings(&nested).unwrap_err().contains("`lr` must be a string, number"));
        let unknown: Settings = serde_json::from_str(r#"{"train": "t", "out": "m", "lrr": 1}"#).unwrap();
        assert!(spec_from_settings(&unknown).unwrap_err().contains("`lrr`"));
    }

    /// The Python package's keyword arguments were refused in the command line's words:
    /// "unexpected argument '--epoch' found", "unexpected argument 'yes' found" for
    /// `freeze_base="yes"`, "… For more information, try '--help'."
    #[test]
    fn settings_are_refused_in_their_own_keys() {
        let refused = |json: &str| {
            let mut settings: Settings = serde_json::from_str(json).unwrap();
            settings.insert("train".into(), "t.jsonl".into());
            settings.insert("out".into(), "m".into());
            spec_from_settings(&settings).unwrap_err()
        };
        assert_eq!(refused(r#"{"epoch": 3}"#), "unknown setting `epoch` (did you mean `epochs`?)");
        assert_eq!(
            refused(r#"{"freeze_base": "yes"}"#),
            "`freeze_base` is a switch: give true or false (found \"yes\")"
        );
        let err = refused(r#"{"epochs": "three"}"#);
        assert!(err.starts_with("`epochs` = \"three\" is not valid: invalid digit"), "{err}");
        // Regression: `epochs=-1` became "--epochs -1", and "-1" was read as a flag: "unknown
        // setting `1`".
        let err = refused(r#"{"epochs": -1}"#);
        assert!(err.starts_with("`epochs` = \"-1\" is not valid"), "{err}");
        // Regression: `max_grad_norm=True` became a bare "--max-grad-norm": "`max_grad_norm` = \"\"
        // is not valid (one of )".
        assert_eq!(
            refused(r#"{"max_grad_norm": true}"#),
            "`max_grad_norm` takes a value, not true (false or null leaves it at its default)"
        );
        let mut negative: Settings = serde_json::from_str(r#"{"train": "t", "out": "m", "adam_beta1": 0.5}"#).unwrap();
        negative.insert("labels".into(), "-a,b".into());
        assert_eq!(spec_from_settings(&negative).unwrap().labels, ["-a", "b"], "a value may start with -");
        let err = refused(r#"{"arch": "cnn"}"#);
        assert!(err.starts_with("`arch` = \"cnn\" is not valid (one of hierarchical, sequence"), "{err}");
        for err in [refused(r#"{"epochs": "three"}"#), refused(r#"{"arch": "cnn"}"#)] {
            assert!(!err.contains("--") && !err.contains("help"), "{err}");
        }
        let err =
            init_spec_from_settings(&serde_json::from_str(r#"{"encoder": "e", "out": "m"}"#).unwrap()).unwrap_err();
        assert_eq!(err, "missing setting `labels`");
        let err = pretrain_spec_from_settings(
            &serde_json::from_str(r#"{"corpus": "c", "out": "o", "preset": "tiny", "model": "m"}"#).unwrap(),
        )
        .unwrap_err();
        assert!(err.starts_with("setting `"), "{err}");
        assert!(err.contains("`preset`") && err.contains("`model`"), "{err}");
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
        assert_eq!((spec.attention_top_k, spec.stride, spec.seed), (3, None, 42), "given and defaults");
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
