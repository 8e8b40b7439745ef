//! The sentence-transformers settings `embed` honours, so that its vectors are the ones
//! `SentenceTransformer(dir).encode(texts)` gives: `sentence_bert_config.json`'s
//! `max_seq_length`, which overrides the tokenizer's own truncation (all-MiniLM-L6-v2 ships a
//! tokenizer.json truncating at 128 but is used at 256); the Pooling module's mode (CLS for
//! the BGE models, mean for most); and whether a Normalize module follows it.

use std::path::Path;

use serde_json::Value;

use crate::error::{ModelError, Result};
use crate::sentence_pooling::SentencePooling;

/// What `sentence_bert_config.json` says (nothing without the file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SentenceBertConfig {
    /// `max_seq_length`: the longest input, overriding the tokenizer's truncation.
    pub max_seq_length: Option<usize>,
    /// `do_lower_case`: sentence-transformers lowercases every text before tokenizing it.
    pub do_lower_case: bool,
}

/// Reads `sentence_bert_config.json` in `dir`, if the file exists.
pub fn sentence_bert_config(dir: &Path) -> Result<SentenceBertConfig> {
    let path = dir.join("sentence_bert_config.json");
    if !path.is_file() {
        return Ok(SentenceBertConfig::default());
    }
    let config = read_json(&path)?;
    Ok(SentenceBertConfig {
        max_seq_length: config.get("max_seq_length").and_then(Value::as_u64).map(|v| v as usize),
        do_lower_case: config.get("do_lower_case").and_then(Value::as_bool).unwrap_or(false),
    })
}

/// What a sentence-transformers directory's modules do after the encoder.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SentenceModules {
    /// The Pooling module's mode: `None` without one (sentence-transformers then averages);
    /// `Err(mode)` for a mode longread does not compute (max, weighted mean, last token, ...).
    pub pooling: Option<std::result::Result<SentencePooling, String>>,
    /// Whether a Normalize module scales each vector to unit length.
    pub normalize: bool,
    /// Modules longread does not apply (a Dense projection after pooling, ...), by type name.
    pub unapplied: Vec<String>,
}

impl SentenceModules {
    /// The pooling sentence-transformers applies: the Pooling module's mode, mean without one;
    /// `Err(mode)` for a mode longread does not compute.
    pub fn effective_pooling(&self) -> std::result::Result<SentencePooling, String> {
        self.pooling.clone().unwrap_or(Ok(SentencePooling::Mean))
    }
}

/// The files of a sentence-transformers repository that `embed` reads beside the checkpoint,
/// given its `modules.json` text (`None`: the repository has none): the two top-level files and
/// each Pooling module's `config.json` — what a Hub download must fetch too.
pub fn sentence_files(modules_json: Option<&str>) -> Vec<String> {
    let mut files = vec!["sentence_bert_config.json".to_owned(), "modules.json".to_owned()];
    let modules: Vec<Value> = modules_json.and_then(|t| serde_json::from_str(t).ok()).unwrap_or_default();
    for module in &modules {
        if module.get("type").and_then(Value::as_str).is_some_and(|t| t.ends_with(".Pooling")) {
            if let Some(folder) = module_folder(module) {
                files.push(format!("{folder}/config.json"));
            }
        }
    }
    files
}

/// A module's folder (`path`, default `1_Pooling`) when it is a plain relative path inside the
/// model directory: no `..`, no root, no backslash (a repository's modules.json must not name
/// files elsewhere).
fn module_folder(module: &Value) -> Option<&str> {
    let folder = module.get("path").and_then(Value::as_str).unwrap_or("1_Pooling");
    let inside = !folder.is_empty()
        && !folder.contains('\\')
        && Path::new(folder).components().all(|c| matches!(c, std::path::Component::Normal(_)));
    inside.then_some(folder)
}

/// Reads `modules.json` in `dir` and its Pooling module's `config.json`; a directory without
/// `modules.json` (a plain transformers checkpoint) has neither module.
pub fn sentence_modules(dir: &Path) -> Result<SentenceModules> {
    let path = dir.join("modules.json");
    if !path.is_file() {
        return Ok(SentenceModules::default());
    }
    let modules = read_json(&path)?;
    let Some(modules) = modules.as_array() else {
        return Err(ModelError::InvalidInput(format!("{}: expected a list of modules", path.display())));
    };
    let kind_of =
        |m: &Value| m.get("type").and_then(Value::as_str).unwrap_or("").rsplit('.').next().unwrap_or("").to_owned();
    let normalize = modules.iter().any(|m| kind_of(m) == "Normalize");
    let unapplied = modules
        .iter()
        .map(kind_of)
        .filter(|k| !matches!(k.as_str(), "Transformer" | "Pooling" | "Normalize"))
        .collect();
    let pooling = match modules.iter().find(|m| kind_of(m) == "Pooling") {
        None => None,
        Some(module) => {
            let Some(folder) = module_folder(module) else {
                return Err(ModelError::InvalidInput(format!(
                    "{}: the Pooling module's path {} is not a folder inside the model directory",
                    path.display(),
                    module.get("path").unwrap_or(&Value::Null)
                )));
            };
            Some(pooling_mode(&dir.join(folder).join("config.json"))?)
        }
    };
    Ok(SentenceModules { pooling, normalize, unapplied })
}

/// The mode a Pooling module's `config.json` sets (`pooling_mode_*_tokens` switches, or the
/// `pooling_mode` name some versions write).
fn pooling_mode(path: &Path) -> Result<std::result::Result<SentencePooling, String>> {
    let config = read_json(path)?;
    let mut modes: Vec<String> = match config.get("pooling_mode").and_then(Value::as_str) {
        Some(name) => vec![name.to_owned()],
        None => config
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(key, on)| key.starts_with("pooling_mode_") && on.as_bool() == Some(true))
            .map(|(key, _)| {
                key.trim_start_matches("pooling_mode_")
                    .trim_end_matches("_tokens")
                    .trim_end_matches("_token")
                    .to_owned()
            })
            .collect(),
    };
    modes.sort();
    Ok(match modes.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["mean"] => Ok(SentencePooling::Mean),
        ["cls"] => Ok(SentencePooling::Cls),
        [] => Err("none".to_owned()),
        _ => Err(modes.join(" + ")),
    })
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io { path: path.to_owned(), source })?;
    serde_json::from_str(&text).map_err(|source| ModelError::Json { path: path.to_owned(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::create_dir_all(dir.join(name).parent().unwrap()).unwrap();
        std::fs::write(dir.join(name), text).unwrap();
    }

    const MODULES: &str = r#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]"#;

    #[test]
    fn a_hub_download_fetches_the_pooling_config_too() {
        assert_eq!(sentence_files(None), ["sentence_bert_config.json", "modules.json"]);
        assert_eq!(
            sentence_files(Some(MODULES)),
            ["sentence_bert_config.json", "modules.json", "1_Pooling/config.json"]
        );
        assert_eq!(sentence_files(Some("not json")).len(), 2);
        let outside = MODULES.replace("1_Pooling", "../../elsewhere");
        assert_eq!(sentence_files(Some(&outside)).len(), 2, "a path out of the repository is not fetched");
    }

    #[test]
    fn the_modules_say_the_pooling_and_the_normalizing() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(sentence_modules(dir.path()).unwrap(), SentenceModules::default(), "a plain checkpoint");
        write(dir.path(), "modules.json", MODULES);
        let pooling = |config: &str| {
            write(dir.path(), "1_Pooling/config.json", config);
            sentence_modules(dir.path()).unwrap().pooling.unwrap()
        };
        // BGE's and all-MiniLM-L6-v2's configs.
        assert_eq!(
            pooling(r#"{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}"#),
            Ok(SentencePooling::Cls)
        );
        assert_eq!(
            pooling(r#"{"pooling_mode_cls_token": false, "pooling_mode_mean_tokens": true}"#),
            Ok(SentencePooling::Mean)
        );
        assert_eq!(pooling(r#"{"pooling_mode": "cls"}"#), Ok(SentencePooling::Cls));
        assert_eq!(pooling(r#"{"pooling_mode_max_tokens": true}"#), Err("max".into()));
        assert_eq!(pooling(r#"{"pooling_mode_lasttoken": true}"#), Err("lasttoken".into()));
        assert_eq!(
            pooling(r#"{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": true}"#),
            Err("cls + mean".into())
        );
        assert!(sentence_modules(dir.path()).unwrap().normalize);
        write(
            dir.path(),
            "modules.json",
            &MODULES.replace("sentence_transformers.models.Normalize", "sentence_transformers.models.Dense"),
        );
        let dense = sentence_modules(dir.path()).unwrap();
        assert_eq!((dense.normalize, dense.unapplied), (false, vec!["Dense".to_owned()]));
        write(dir.path(), "modules.json", &MODULES.replace("1_Pooling", "/etc"));
        let outside = sentence_modules(dir.path()).unwrap_err().to_string();
        assert!(outside.contains("path \"/etc\" is not a folder inside the model directory"), "{outside}");
        write(dir.path(), "modules.json", "{}");
        assert!(sentence_modules(dir.path()).unwrap_err().to_string().contains("expected a list of modules"));
    }
}
