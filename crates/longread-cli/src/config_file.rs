//! `--config FILE.toml` for `train`: every flag can come from the file; flags given on the
//! command line win. The file's keys are the flag names (`lr = 2e-5`, `freeze-base = true`;
//! `_` and `-` both accepted); a boolean `true` sets a switch, `false` leaves it off.

use std::ffi::OsString;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use longread_train::run::flags::{flag_named_by_clap, settings_as_flags, Settings};

/// Expands `--config FILE` of the `train` subcommand into flags placed right after the
/// subcommand, before the user's own, so that the user's win (the command has
/// `args_override_self`). Clap has already parsed `args` and found `config` among `train`'s
/// arguments; `args` is searched only for where the subcommand and that `--config` stand: the
/// first `train` (global options take no such value) and the `--config` naming `config`.
/// Returns the expanded arguments and the flags the file gave.
pub fn expand(args: Vec<OsString>, config: &Path) -> Result<(Vec<OsString>, Vec<OsString>)> {
    let sub = args.iter().position(|a| a == "train").context("the train subcommand is not in the arguments")?;
    let inline = {
        let mut flag = OsString::from("--config=");
        flag.push(config);
        flag
    };
    let (at, len) = (sub + 1..args.len())
        .find_map(|i| {
            if args[i] == "--config" && args.get(i + 1).is_some_and(|v| Path::new(v) == config) {
                Some((i, 2))
            } else if args[i] == inline {
                Some((i, 1))
            } else {
                None
            }
        })
        .context("--config: not found after the train subcommand")?;
    let from_file = flags_from_toml(config)?;
    let mut out: Vec<OsString> = args[..=sub].to_vec();
    out.extend(from_file.iter().cloned());
    out.extend(args[sub + 1..at].iter().cloned());
    out.extend(args[at + len..].iter().cloned());
    Ok((out, from_file))
}

/// A note for a parse error in a flag that `config` supplied (clap names the flag, which the
/// user did not type: `epoch = 3` read as "unexpected argument '--epoch'"); `None` when the
/// error is in a flag the file does not give.
pub fn note_on_error(err: &clap::Error, file_flags: &[OsString], config: &Path) -> Option<String> {
    let clap::error::ContextValue::String(arg) = err.get(clap::error::ContextKind::InvalidArg)? else {
        return None;
    };
    let flag = flag_named_by_clap(arg);
    let key = flag.strip_prefix("--")?;
    file_flags.iter().any(|f| f.to_str().map(flag_named_by_clap) == Some(flag)).then(|| {
        format!(
            "note: `{flag}` came from {} (its key `{key}`); the file's keys are `longread train`'s flag names",
            config.display()
        )
    })
}

/// The file's table as flags, read as the Python package's settings are
/// ([`settings_as_flags`]).
fn flags_from_toml(path: &Path) -> Result<Vec<OsString>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading config {}", path.display()))?;
    let table: toml::Table = toml::from_str(&text).with_context(|| format!("{}: invalid TOML", path.display()))?;
    // JSON has no NaN or infinity: such a value would arrive as null, a setting left out.
    for (key, value) in &table {
        let floats = match value {
            toml::Value::Array(items) => items.iter().filter_map(toml::Value::as_float).collect(),
            one => one.as_float().into_iter().collect::<Vec<_>>(),
        };
        if let Some(f) = floats.into_iter().find(|f| !f.is_finite()) {
            bail!("{}: `{key}` = {f} is not a finite number", path.display());
        }
    }
    let settings: Settings = toml::Value::Table(table).try_into()?;
    let flags = settings_as_flags(&settings).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    Ok(flags.into_iter().map(OsString::from).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn file_flags_come_before_the_users_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(
            &path,
            "lr = 3e-5\nfreeze_base = true\nno-recompute = false\nepochs = 4\nschedule = \"cosine\"\n",
        )
        .unwrap();
        let args = os(&["longread", "-q", "train", "--config", path.to_str().unwrap(), "--epochs", "2"]);
        let out: Vec<String> = expand(args, &path).unwrap().0.into_iter().map(|s| s.into_string().unwrap()).collect();
        assert_eq!(out[..3], ["longread", "-q", "train"]);
        assert!(out.contains(&"--lr=0.00003".to_string()), "{out:?}");
        assert!(out.contains(&"--freeze-base".to_string()) && !out.contains(&"--no-recompute".to_string()));
        assert!(out.contains(&"--schedule=cosine".to_string()));
        assert_eq!(out[out.len() - 2..], ["--epochs", "2"], "the user's flags last");
        assert!(!out.contains(&"--config".to_string()));
    }

    /// Regression: argv was scanned for `train` and `--config` before clap ran, so another
    /// command's value `train` (or a --config meant for `pretrain`) was taken for them. Now clap
    /// finds them; only their positions are looked up, and the --config of `train` is the one
    /// expanded even when an earlier value is also called `train`.
    #[test]
    fn the_config_of_the_train_subcommand_is_expanded_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(&path, "epochs = 4\n").unwrap();
        let p = path.to_str().unwrap();
        let args = os(&["longread", "train", "--model", "train", &format!("--config={p}"), "--lr", "1e-5"]);
        let out: Vec<String> = expand(args, &path).unwrap().0.into_iter().map(|s| s.into_string().unwrap()).collect();
        assert_eq!(out, ["longread", "train", "--epochs=4", "--model", "train", "--lr", "1e-5"]);
    }

    #[test]
    fn bad_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(&path, "lr = { a = 1 }\n").unwrap();
        let err = expand(os(&["longread", "train", "--config", path.to_str().unwrap()]), &path).unwrap_err();
        assert!(format!("{err:#}").contains("`lr` must be a string, number, boolean or a list of them"), "{err:#}");
        std::fs::write(&path, "task = [\"a=x\", \"b=y\"]\n").unwrap();
        let out: Vec<String> = expand(os(&["longread", "train", "--config", path.to_str().unwrap()]), &path)
            .unwrap()
            .0
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect();
        assert_eq!(out[2..], ["--task=a=x", "--task=b=y"], "an array repeats the flag");
        for bad in ["lr = nan\n", "lr = [1.0, inf]\n"] {
            std::fs::write(&path, bad).unwrap();
            let err = expand(os(&["longread", "train", "--config", path.to_str().unwrap()]), &path).unwrap_err();
            assert!(format!("{err:#}").contains("`lr` = ") && format!("{err:#}").contains("not a finite number"));
        }
        std::fs::write(&path, "lr = \n").unwrap();
        let err = expand(os(&["longread", "train", "--config", path.to_str().unwrap()]), &path).unwrap_err();
        assert!(format!("{err:#}").contains("invalid TOML"));
    }
}
