//! `longread inspect`: configuration summary and parameter breakdown.

use anyhow::{Context, Result};
use clap::Args;
use longread_model::params::ParameterBreakdown;
use longread_model::Checkpoint;
use serde_json::json;

/// Arguments of `longread inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Model directory, or a Hugging Face repository id when built with `--features hub`.
    #[arg(long)]
    model: String,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs `longread inspect`.
pub fn run(args: InspectArgs) -> Result<()> {
    let dir = longread_model::resolve_model_dir(&args.model)?;
    if longread_model::han::is_han_dir(&dir) {
        return inspect_han(&dir, args.json);
    }
    let checkpoint = Checkpoint::open(&dir).with_context(|| format!("opening model {}", dir.display()))?;
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
    let tasks: Vec<serde_json::Value> =
        cfg.extra.get("longread").and_then(|l| l.get("tasks")).and_then(|t| t.as_array()).cloned().unwrap_or_default();
    let weight_files: Vec<String> = checkpoint
        .files
        .weights
        .iter()
        .filter_map(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
        .collect();

    if args.json {
        let summary = json!({
            "model_dir": dir.display().to_string(),
            "model_type": cfg.model_type,
            "architectures": architectures,
            "num_hidden_layers": cfg.num_hidden_layers,
            "hidden_size": cfg.hidden_size,
            "num_attention_heads": cfg.num_attention_heads,
            "intermediate_size": cfg.intermediate_size(),
            "hidden_act": cfg.hidden_act,
            "vocab_size": cfg.vocab_size,
            "max_position_embeddings": cfg.max_position_embeddings,
            "max_sequence_length": cfg.max_sequence_length(),
            "type_vocab_size": cfg.type_vocab_size,
            "layer_norm_eps": cfg.layer_norm_eps,
            "hidden_dropout_prob": cfg.hidden_dropout_prob,
            "attention_probs_dropout_prob": cfg.attention_probs_dropout_prob,
            "weight_files": weight_files,
            "weight_prefix": prefix,
            "tokenizer": checkpoint.files.tokenizer.is_some(),
            "parameters": params,
            "tasks": tasks,
        });
        println!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(());
    }

    let arch = architectures.as_array().and_then(|a| a.first()).and_then(|v| v.as_str()).unwrap_or("-");
    println!("model            {}", dir.display());
    println!("type             {} ({arch})", cfg.model_type);
    println!(
        "shape            {} layers, hidden {}, {} heads × {}, FFN {}, {}",
        cfg.num_hidden_layers,
        cfg.hidden_size,
        cfg.num_attention_heads,
        cfg.head_size(),
        cfg.intermediate_size(),
        cfg.hidden_act
    );
    println!(
        "vocabulary       {} tokens, {} positions (max sequence {}), {} token types",
        cfg.vocab_size,
        cfg.max_position_embeddings,
        cfg.max_sequence_length(),
        cfg.type_vocab_size
    );
    println!(
        "normalisation    layer_norm_eps {:e}; dropout hidden {}, attention {}",
        cfg.layer_norm_eps, cfg.hidden_dropout_prob, cfg.attention_probs_dropout_prob
    );
    println!(
        "weights          {} (prefix: {})",
        weight_files.join(", "),
        if prefix.is_empty() { "none" } else { &prefix }
    );
    println!("tokenizer        {}", if checkpoint.files.tokenizer.is_some() { "tokenizer.json" } else { "missing" });
    for (i, task) in tasks.iter().enumerate() {
        println!(
            "{:<16} {} (column \"{}\"): {}",
            if i == 0 { "tasks" } else { "" },
            task["name"].as_str().unwrap_or("?"),
            task["column"].as_str().unwrap_or("?"),
            task["labels"]
                .as_array()
                .map(|l| l.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join(", "))
                .unwrap_or_default()
        );
    }
    println!();
    println!("{:<18} {:>14}", "parameters", "count");
    let per_layer = params.per_layer.first().copied().unwrap_or(0);
    let trainable_note = if pooler_used {
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
        println!("  {name:<16} {:>14}{note}", group(count));
    }
    Ok(())
}

/// `inspect` on a HAN model directory: its sizes, grid, labels and parameters per part.
fn inspect_han(dir: &std::path::Path, as_json: bool) -> Result<()> {
    let model = longread_model::han::HanClassifier::load(dir, &candle_core::Device::Cpu)
        .with_context(|| format!("loading HAN model {}", dir.display()))?;
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
    if as_json {
        let mut summary = serde_json::to_value(c)?;
        summary["model_dir"] = json!(dir.display().to_string());
        summary["architectures"] = json!([longread_model::han::HAN_ARCHITECTURE]);
        summary["parameters"] = json!({
            "parts": parts.iter().map(|(p, n)| (p.clone(), json!(n))).collect::<serde_json::Map<_, _>>(),
            "total": total,
            "trainable": total,
        });
        println!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(());
    }
    println!("model            {}", dir.display());
    println!("type             HAN ({})", longread_model::han::HAN_ARCHITECTURE);
    println!(
        "shape            embeddings {}, word GRU 2 × {}, sentence GRU 2 × {}, attention {} / {} × {} hop(s), \
         dropout {}",
        c.embedding_dim,
        c.word_hidden,
        c.sentence_hidden,
        c.word_attention_size,
        c.sentence_attention_size,
        c.attention_hops,
        c.dropout
    );
    println!("vocabulary       {} words (vocab.json)", c.vocab_size);
    println!("grid             {} sentences × {} words per document", c.doc_size, c.sent_size);
    println!("labels           {}", c.labels.join(", "));
    println!();
    println!("{:<18} {:>14}", "parameters", "count");
    for (part, count) in &parts {
        println!("  {part:<16} {:>14}", group(*count));
    }
    println!("  {:<16} {:>14}  (all train)", "total", group(total));
    Ok(())
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
