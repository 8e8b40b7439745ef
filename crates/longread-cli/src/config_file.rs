//! `--config FILE.toml` for `train`: every flag can come from the file; flags given on the
//! command line win. The file's keys are the flag names (`lr = 2e-5`, `freeze-base = true`;
//! `_` and `-` both accepted); a boolean `true` sets a switch, `false` leaves it off.

use std::ffi::OsString;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// Expands `--config FILE` (after the `train` subcommand) into flags placed before the user's
/// own, so that the user's win (the command has `args_override_self`).
pub fn expand(args: Vec<OsString>) -> Result<Vec<OsString>> {
    let Some(sub) = args.iter().position(|a| a == "train") else { return Ok(args) };
    let Some(flag) = args.iter().skip(sub).position(|a| a == "--config").map(|i| i + sub) else { return Ok(args) };
    let path = args.get(flag + 1).context("--config needs a file")?.clone();
    let from_file = flags_from_toml(Path::new(&path))?;
    let mut out: Vec<OsString> = args[..=sub].to_vec();
    out.extend(from_file);
    out.extend(args[sub + 1..flag].iter().cloned());
    out.extend(args[flag + 2..].iter().cloned());
    Ok(out)
}

fn flags_from_toml(path: &Path) -> Result<Vec<OsString>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading config {}", path.display()))?;
    let table: toml::Table = toml::from_str(&text).with_context(|| format!("{}: invalid TOML", path.display()))?;
    let mut flags = Vec::new();
    for (key, value) in table {
        let flag = format!("--{}", key.replace('_', "-"));
        // An array repeats the flag (`task = ["topic=label", "length=length"]`).
        let values = match value {
            toml::Value::Array(items) => items,
            one => vec![one],
        };
        for value in values {
            match value {
                toml::Value::Boolean(true) => flags.push(flag.clone().into()),
                toml::Value::Boolean(false) => {}
                toml::Value::String(s) => flags.extend([flag.clone().into(), s.into()]),
                toml::Value::Integer(i) => flags.extend([flag.clone().into(), i.to_string().into()]),
                toml::Value::Float(f) => flags.extend([flag.clone().into(), f.to_string().into()]),
                other => bail!(
                    "{}: `{key}` must be a string, number, boolean or an array of them, not {}",
                    path.display(),
                    other.type_str()
                ),
            }
        }
    }
    Ok(flags)
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
        let out: Vec<String> = expand(args).unwrap().into_iter().map(|s| s.into_string().unwrap()).collect();
        assert_eq!(out[..3], ["longread", "-q", "train"]);
        assert!(out.windows(2).any(|w| w == ["--lr", "0.00003"]));
        assert!(out.contains(&"--freeze-base".to_string()) && !out.contains(&"--no-recompute".to_string()));
        assert!(out.windows(2).any(|w| w == ["--schedule", "cosine"]));
        assert_eq!(out[out.len() - 2..], ["--epochs", "2"], "the user's flags last");
        assert!(!out.contains(&"--config".to_string()));
    }

    #[test]
    fn bad_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(&path, "lr = { a = 1 }\n").unwrap();
        let err = expand(os(&["longread", "train", "--config", path.to_str().unwrap()])).unwrap_err();
        assert!(format!("{err:#}").contains("`lr` must be a string, number, boolean or an array of them"));
        std::fs::write(&path, "task = [\"a=x\", \"b=y\"]\n").unwrap();
        let out: Vec<String> = expand(os(&["longread", "train", "--config", path.to_str().unwrap()]))
            .unwrap()
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect();
        assert_eq!(out[2..], ["--task", "a=x", "--task", "b=y"], "an array repeats the flag");
        std::fs::write(&path, "lr = \n").unwrap();
        let err = expand(os(&["longread", "train", "--config", path.to_str().unwrap()])).unwrap_err();
        assert!(format!("{err:#}").contains("invalid TOML"));
    }
}
