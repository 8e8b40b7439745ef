//! A model directory at a glance (`longread inspect`, the server's `/info`): configuration,
//! weight files, tasks and a parameter breakdown that adds up, for encoders, longread
//! classifiers and HANs alike.

use std::fmt::Write;
use std::path::Path;

use serde_json::{json, Value};

use crate::ensemble::read_spec;
use crate::model_kind::ModelKind;
use longread_metrics::terminal::printable;
use longread_model::checkpoint::{sentence_bert_config, sentence_modules, Checkpoint};
use longread_model::error::Result;
use longread_model::han::{HanClassifier, HAN_ARCHITECTURE};
use longread_model::hierarchical::{Architecture, ClassifierConfig, LongreadSection};
use longread_model::params::ParameterBreakdown;

/// How `inspect` describes a multi-label model's decisions.
const MULTI_LABEL_WORDS: &str =
    "one sigmoid per label, each decided on its own (at probability 0.5 unless a decision rule says otherwise)";

/// A model directory's summary: as one JSON object, and as a table for people.
#[derive(Debug, Clone)]
pub struct ModelSummary {
    /// Configuration, weight files, tasks and the parameter breakdown.
    pub json: Value,
    /// The same for people, one item per line.
    pub table: String,
}

/// Summarises any model directory: a Hugging Face encoder, a longread classifier or a HAN.
/// The table shows every line [`printable`]: a config.json (one from the Hub, say) may hold
/// label names or a model type with control characters.
pub fn summarize(dir: &Path) -> Result<ModelSummary> {
    let ModelSummary { mut json, mut table } = summarize_kind(dir)?;
    // Any kind may have a calibration (`longread calibrate`) and a decision rule (`longread
    // threshold`).
    if let Some(calibration) = crate::decision::Temperature::load(dir)? {
        if !table.ends_with('\n') {
            table.push('\n');
        }
        table += &format!("calibration      {} ({})\n", calibration.describe(), calibration.chosen_by);
        json["calibration"] = serde_json::to_value(&calibration).unwrap_or_default();
    }
    let labels: Vec<String> = json["labels"]
        .as_array()
        .map_or_else(Vec::new, |l| l.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect());
    if let Some(decision) = crate::decision::Decision::load(dir, &labels)? {
        if !table.ends_with('\n') {
            table.push('\n');
        }
        table += &format!("decision         {} ({})\n", decision.describe(), decision.chosen_by);
        json["decision"] = serde_json::to_value(&decision).unwrap_or_default();
    }
    let table = table.split('\n').map(printable).collect::<Vec<_>>().join("\n");
    Ok(ModelSummary { json, table })
}

fn summarize_kind(dir: &Path) -> Result<ModelSummary> {
    match ModelKind::of(dir) {
        ModelKind::Ensemble => return summarize_ensemble(dir),
        ModelKind::Bow => return summarize_bow(dir),
        ModelKind::Han => return summarize_han(dir),
        ModelKind::Encoder => {}
    }
    let checkpoint = Checkpoint::open(dir)?;
    let facts = EncoderFacts::of(&checkpoint, dir);
    Ok(ModelSummary { json: encoder_json(dir, &checkpoint, &facts), table: encoder_table(dir, &checkpoint, &facts) })
}

/// What an encoder checkpoint's summary is made of besides its config.
struct EncoderFacts {
    prefix: String,
    params: ParameterBreakdown,
    pooler_used: bool,
    architectures: Value,
    tasks: Vec<Value>,
    weight_files: Vec<String>,
    /// A wide-and-deep model's `longread.wide` (null otherwise).
    wide: Value,
    /// A longread classifier's head (none for a plain encoder, or a section that does not load:
    /// `predict` names its problem).
    classifier: Option<ClassifierConfig>,
    /// What `embed` does with a sentence-transformers directory (null for another).
    sentence: Value,
}

impl EncoderFacts {
    fn of(checkpoint: &Checkpoint, dir: &Path) -> Self {
        let cfg = &checkpoint.config;
        let prefix = checkpoint.encoder_prefix().to_owned();
        let store = &checkpoint.store;
        let tensors: Vec<(&str, &[usize])> = store.names().filter_map(|n| store.shape(n).map(|s| (n, s))).collect();
        // Default fine-tuning (`longread train`) freezes the embeddings; BERT's own pooler
        // (`pooler.dense`) is used only by the single-chunk baseline (`--arch sequence`).
        let pooler_used = cfg.extra.get("longread").and_then(|l| l.get("architecture")) == Some(&json!("sequence"));
        let params = ParameterBreakdown::from_tensors(tensors, &prefix, cfg.num_hidden_layers, |name| {
            let local = name.strip_prefix(prefix.as_str()).map_or(name, |n| n.trim_start_matches('.'));
            !(local.starts_with("embeddings.") || (!pooler_used && local.starts_with("pooler.dense.")))
        });
        let architectures = cfg.extra.get("architectures").cloned().unwrap_or(json!([]));
        // A multi-task classifier lists its tasks in the longread section.
        let tasks: Vec<serde_json::Value> = cfg
            .extra
            .get("longread")
            .and_then(|l| l.get("tasks"))
            .and_then(|t| t.as_array())
            .cloned()
            .unwrap_or_default();
        let weight_files: Vec<String> = checkpoint
            .files
            .weights
            .iter()
            .filter_map(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
            .collect();
        let wide = cfg.extra.get("longread").and_then(|l| l.get("wide")).cloned().unwrap_or(Value::Null);
        let classifier = cfg
            .extra
            .contains_key("longread")
            .then(|| ClassifierConfig::from_file(&checkpoint.files.config, cfg.clone()).ok())
            .flatten();
        let sentence = sentence_facts(dir);
        Self { prefix, params, pooler_used, architectures, tasks, weight_files, wide, classifier, sentence }
    }
}

/// A sentence-transformers directory's modules as `embed` applies them: pooling (or the mode it
/// refuses), normalizing, the longest input and the modules it would refuse; null without
/// `modules.json` or when it cannot be read (`embed` names the problem).
fn sentence_facts(dir: &Path) -> Value {
    if !dir.join("modules.json").is_file() {
        return Value::Null;
    }
    let Ok(modules) = sentence_modules(dir) else { return Value::Null };
    let pooling = match modules.effective_pooling() {
        Ok(mode) => mode.name().to_owned(),
        Err(mode) => format!("{mode} (not computed: embed needs --pooling)"),
    };
    json!({
        "pooling": pooling,
        "normalize": modules.normalize,
        "max_seq_length": sentence_bert_config(dir).ok().and_then(|c| c.max_seq_length),
        "unapplied_modules": modules.unapplied,
    })
}

/// The summary as one JSON object.
fn encoder_json(dir: &Path, checkpoint: &Checkpoint, facts: &EncoderFacts) -> Value {
    let cfg = &checkpoint.config;
    let EncoderFacts { prefix, params, architectures, tasks, weight_files, wide, classifier, .. } = facts;
    json!({
        "model_dir": dir.display().to_string(),
        "model_type": cfg.model_type,
        "family": cfg.family().to_string(),
        "architectures": architectures,
        "num_hidden_layers": cfg.num_hidden_layers,
        "hidden_size": cfg.hidden_size,
        "num_attention_heads": cfg.num_attention_heads,
        "intermediate_size": cfg.intermediate_size(),
        "hidden_act": cfg.hidden_act,
        "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.max_position_embeddings,
        "max_sequence_length": cfg.max_sequence_length(),
        "type_vocab_size": if cfg.has_token_types() { cfg.type_vocab_size } else { 0 },
        "embedding_size": cfg.embedding_size(),
        "layer_norm_eps": cfg.layer_norm_eps,
        "hidden_dropout_prob": cfg.hidden_dropout_prob,
        "attention_probs_dropout_prob": cfg.attention_probs_dropout_prob,
        "weight_files": weight_files,
        "weight_prefix": prefix,
        "tokenizer": checkpoint.files.tokenizer.is_some(),
        "parameters": params,
        "tasks": tasks,
        "wide": wide,
        "labels": classifier.as_ref().map(|c| c.labels.clone()),
        "classifier": classifier.as_ref().map(|c| &c.longread),
        "sentence_transformers": facts.sentence,
    })
}

/// The summary as a table for people.
fn encoder_table(dir: &Path, checkpoint: &Checkpoint, facts: &EncoderFacts) -> String {
    let cfg = &checkpoint.config;
    let EncoderFacts { prefix, params, pooler_used, architectures, tasks, weight_files, wide, classifier, sentence } =
        facts;
    let mut t = String::new();

    let arch = architectures.as_array().and_then(|a| a.first()).and_then(|v| v.as_str()).unwrap_or("-");
    writeln!(t, "model            {}", dir.display()).ok();
    writeln!(t, "family           {} (model_type {}, {arch})", cfg.family(), cfg.model_type).ok();
    writeln!(
        t,
        "shape            {} layers, hidden {}, {} heads × {}, FFN {}, {}",
        cfg.num_hidden_layers,
        cfg.hidden_size,
        cfg.num_attention_heads,
        cfg.head_size(),
        cfg.intermediate_size(),
        cfg.hidden_act
    )
    .ok();
    writeln!(
        t,
        "vocabulary       {} tokens, {} positions (max sequence {}), {} token types",
        cfg.vocab_size,
        cfg.max_position_embeddings,
        cfg.max_sequence_length(),
        if cfg.has_token_types() { cfg.type_vocab_size } else { 0 }
    )
    .ok();
    writeln!(
        t,
        "normalisation    layer_norm_eps {:e}; dropout hidden {}, attention {}",
        cfg.layer_norm_eps, cfg.hidden_dropout_prob, cfg.attention_probs_dropout_prob
    )
    .ok();
    writeln!(
        t,
        "weights          {} (prefix: {})",
        weight_files.join(", "),
        if prefix.is_empty() { "none" } else { &prefix }
    )
    .ok();
    writeln!(t, "tokenizer        {}", if checkpoint.files.tokenizer.is_some() { "tokenizer.json" } else { "missing" })
        .ok();
    if let Some(pooling) = sentence["pooling"].as_str() {
        let s = sentence;
        let length = s["max_seq_length"].as_u64().map_or(String::new(), |n| format!(", up to {n} tokens"));
        let scaled = if s["normalize"] == json!(true) { ", unit length" } else { "" };
        let refused = s["unapplied_modules"]
            .as_array()
            .and_then(|m| m.first())
            .map_or(String::new(), |m| format!("; a {} module embed refuses", m.as_str().unwrap_or("?")));
        writeln!(t, "embeddings       {pooling} pooling{scaled}{length} (sentence-transformers modules){refused}").ok();
    }
    if let Some(c) = classifier {
        writeln!(t, "classifier       {}", head_line(&c.longread)).ok();
        if tasks.is_empty() {
            writeln!(t, "labels           {}", c.labels.join(", ")).ok();
        }
        if c.longread.multi_label {
            writeln!(t, "multi-label      {MULTI_LABEL_WORDS}").ok();
        }
    }
    for (i, task) in tasks.iter().enumerate() {
        writeln!(
            t,
            "{:<16} {} (column \"{}\"): {}",
            if i == 0 { "tasks" } else { "" },
            task["name"].as_str().unwrap_or("?"),
            task["column"].as_str().unwrap_or("?"),
            task["labels"]
                .as_array()
                .map(|l| l.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join(", "))
                .unwrap_or_default()
        )
        .ok();
    }
    if let Some(scale) = wide["scale"].as_f64() {
        let what = match classifier.as_ref().is_some_and(|c| c.longread.multi_label) {
            true => "each label's log-odds",
            false => "its log-probabilities",
        };
        writeln!(t, "wide             a bag of words in wide/: {what} × {scale:.3} join the logits").ok();
    }
    writeln!(t).ok();
    writeln!(t, "{:<18} {:>14}", "parameters", "count").ok();
    let per_layer = params.per_layer.first().copied().unwrap_or(0);
    let trainable_note = if *pooler_used {
        "  (default fine-tuning: embeddings frozen)"
    } else {
        "  (default fine-tuning: embeddings frozen, BERT pooler unused)"
    };
    let rows = [
        ("embeddings", params.embeddings, String::new()),
        ("encoder layers", params.encoder_layers, format!("  ({} × {})", params.per_layer.len(), group(per_layer))),
        ("pooler/attention", params.pooler_attention, String::new()),
        ("classifier", params.classifier, String::new()),
        ("other task heads", params.task_heads, String::new()),
        ("other", params.other, String::new()),
        ("total", params.total, String::new()),
        ("trainable", params.trainable, trainable_note.into()),
    ];
    for (name, count, note) in rows {
        if (name == "other" || name == "other task heads") && count == 0 {
            continue;
        }
        writeln!(t, "  {name:<16} {:>14}{note}", group(count)).ok();
    }
    t
}

/// A HAN model directory's summary: its sizes, grid, labels and parameters per part.
fn summarize_han(dir: &Path) -> Result<ModelSummary> {
    let model = HanClassifier::load(dir, &longread_model::device::host())?;
    let c = model.config();
    let mut parts: Vec<(String, usize)> = Vec::new();
    for (name, var) in model.named_vars() {
        let part = name.split('.').next().unwrap_or_default().to_string();
        match parts.iter_mut().find(|(p, _)| *p == part) {
            Some((_, n)) => *n += var.elem_count(),
            None => parts.push((part, var.elem_count())),
        }
    }
    let total: usize = parts.iter().map(|(_, n)| n).sum();
    let mut summary = serde_json::to_value(c).unwrap_or_default();
    summary["model_dir"] = json!(dir.display().to_string());
    summary["architectures"] = json!([HAN_ARCHITECTURE]);
    summary["parameters"] = json!({
        "parts": parts.iter().map(|(p, n)| (p.clone(), json!(n))).collect::<serde_json::Map<_, _>>(),
        "total": total,
        "trainable": total,
    });
    let mut t = String::new();
    writeln!(t, "model            {}", dir.display()).ok();
    writeln!(t, "type             HAN ({})", HAN_ARCHITECTURE).ok();
    writeln!(
        t,
        "shape            embeddings {}, word GRU 2 × {}, sentence GRU 2 × {}, attention {} / {} × {} hop(s), \
         dropout {}",
        c.embedding_dim,
        c.word_hidden,
        c.sentence_hidden,
        c.word_attention_size,
        c.sentence_attention_size,
        c.attention_hops,
        c.dropout
    )
    .ok();
    writeln!(t, "vocabulary       {} words (vocab.json)", c.vocab_size).ok();
    writeln!(t, "grid             {} sentences × {} words per document", c.doc_size, c.sent_size).ok();
    writeln!(t, "labels           {}", c.labels.join(", ")).ok();
    if c.multi_label {
        writeln!(t, "multi-label      {MULTI_LABEL_WORDS}").ok();
    }
    writeln!(t).ok();
    writeln!(t, "{:<18} {:>14}", "parameters", "count").ok();
    for (part, count) in &parts {
        writeln!(t, "  {part:<16} {:>14}", group(*count)).ok();
    }
    writeln!(t, "  {:<16} {:>14}  (all train)", "total", group(total)).ok();
    Ok(ModelSummary { json: summary, table: t })
}

/// A bag-of-words model: its `bow.json` and its number of features.
fn summarize_bow(dir: &Path) -> Result<ModelSummary> {
    let invalid = |e: longread_bow::BowError| longread_model::error::ModelError::InvalidInput(e.to_string());
    let model = longread_bow::BowModel::load(dir).map_err(invalid)?;
    let path = longread_bow::bow_config_path(dir);
    let text = std::fs::read_to_string(&path).map_err(longread_model::model_dir::io(&path))?;
    let mut summary: Value = serde_json::from_str(&text)
        .map_err(|source| longread_model::error::ModelError::Json { path: path.clone(), source })?;
    summary["model_dir"] = json!(dir.display().to_string());
    summary["features"] = json!(model.features());
    summary["parameters"] = json!({ "total": model.features() * model.labels().len() });
    let mut t = String::new();
    writeln!(t, "model            {}", dir.display()).ok();
    writeln!(t, "type             bag of words (TF-IDF + L2 logistic regression, C {})", model.c()).ok();
    let tfidf = model.tfidf();
    let chars = tfidf.char_ngrams.map_or(String::new(), |[lo, hi]| format!(" + character {lo}–{hi}-grams"));
    let kinds = format!("word 1–{}-grams{chars}, min_df {}", tfidf.ngram_max, tfidf.min_df);
    writeln!(t, "features         {} ({kinds})", group(model.features())).ok();
    writeln!(t, "labels           {}", model.labels().join(", ")).ok();
    if model.multi_label() {
        writeln!(t, "multi-label      one logistic regression per label, each decided on its own (at probability 0.5 unless a decision rule says otherwise)")
            .ok();
    }
    Ok(ModelSummary { json: summary, table: t })
}

/// An ensemble: its labels and each member's weight and summary.
fn summarize_ensemble(dir: &Path) -> Result<ModelSummary> {
    let spec = read_spec(dir)?;
    let mut members = Vec::with_capacity(spec.members.len());
    let mut t = String::new();
    writeln!(t, "model            {}", dir.display()).ok();
    writeln!(t, "type             ensemble of {} models (weighted mean of probabilities)", spec.members.len()).ok();
    writeln!(t, "labels           {}", spec.labels.join(", ")).ok();
    for m in &spec.members {
        let member = summarize(&dir.join(&m.dir))?;
        writeln!(t, "\nmember {} (weight {:.3}, copied from {})", m.dir, m.weight, m.source).ok();
        for line in member.table.lines() {
            writeln!(t, "  {line}").ok();
        }
        members.push(json!({ "dir": m.dir, "weight": m.weight, "source": m.source, "summary": member.json }));
    }
    let summary = json!({
        "model_dir": dir.display().to_string(),
        "architectures": ["LongreadEnsemble"],
        "labels": spec.labels,
        "members": members,
    });
    Ok(ModelSummary { json: summary, table: t })
}

/// How a classifier reads a document, in words: "hierarchical: attention pooling over chunks of
/// 512 tokens (stride 256, at most 20, head selection, cls vectors)".
fn head_line(l: &LongreadSection) -> String {
    if l.architecture == Architecture::Sequence {
        return format!("sequence: the first {} tokens only, the first token's state", l.chunk_size);
    }
    let mut line = format!(
        "{}: {} pooling over chunks of {} tokens (stride {}, at most {}, {} selection, {} vectors)",
        name(&l.architecture),
        name(&l.pooling_strategy),
        l.chunk_size,
        l.stride,
        if l.max_chunks == 0 { "no limit".to_string() } else { l.max_chunks.to_string() },
        name(&l.chunk_selection),
        name(&l.chunk_pooling),
    );
    if l.attention_top_k > 0 {
        line += &format!(", attention on the top {} chunks", l.attention_top_k);
    }
    if l.ordinal {
        line += ", ordinal labels";
    }
    line
}

/// An enum setting as config.json spells it ("attention", "max_logits").
fn name<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_else(|| "?".into())
}

/// 1234567 → "1,234,567".
fn group(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
