//! `longread quickstart`: the whole toolkit on a task where reading one chunk is not enough.
//!
//! 1. writes a synthetic long-document set (see [`synthetic`]),
//! 2. trains a byte-level BPE tokenizer and pretrains a tiny RoBERTa with MLM on its text
//!    (or, with `--encoder`, uses a pretrained encoder instead),
//! 3. fine-tunes a hierarchical classifier and the single-chunk baseline on the same data,
//! 4. evaluates both on the held-out test documents and writes an HTML report.
//!
//! Every step is an ordinary `longread` command line, printed before it runs.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use longread_classifier::ClassifierOptions;
use longread_metrics::Report;
use longread_model::{DeviceChoice, Precision};
use longread_text::{ChunkSelection, Chunker, ChunkingConfig, TextTokenizer};

use crate::commands::eval::evaluate_file;
use longread_text::synthetic::{transcripts, Transcript, LABELS};

/// The quickstart trains on the CPU and evaluates there too, in f32.
const QUICKSTART_EVAL: ClassifierOptions = ClassifierOptions {
    precision: Some(Precision::F32),
    max_batch_tokens: Some(4096),
    device: DeviceChoice::Cpu,
    occlusion: false,
};

/// Arguments of `longread quickstart`.
#[derive(Debug, Args)]
pub struct QuickstartArgs {
    /// Output directory (must not exist): data/, tokenizer/, encoder/, hierarchical/,
    /// sequence/, report.html and summary.json.
    #[arg(long, visible_alias = "output", default_value = "quickstart")]
    out: PathBuf,
    /// A pretrained encoder (config.json, model.safetensors, tokenizer.json) to use instead of
    /// training a tokenizer and a tiny RoBERTa.
    #[arg(long)]
    encoder: Option<PathBuf>,
    /// Tokens per chunk, special tokens included: the hierarchical model's chunks (which
    /// overlap by a quarter) and all that the single-chunk baseline reads. 512 is the full-size
    /// experiment (8× the tokens, far longer).
    #[arg(long, default_value_t = 64)]
    chunk_size: usize,
    /// Shortest and longest document, in chunks (roughly; counted exactly after tokenizing).
    #[arg(long, default_value_t = 3)]
    min_chunks: usize,
    /// See --min-chunks.
    #[arg(long, default_value_t = 30)]
    max_chunks: usize,
    /// Training documents (10% of them are held out as dev).
    #[arg(long, default_value_t = 300)]
    train_docs: usize,
    /// Test documents.
    #[arg(long, default_value_t = 150)]
    test_docs: usize,
    /// MLM pretraining steps of the tiny encoder (batches of 16 sequences of --chunk-size tokens).
    #[arg(long, default_value_t = 150)]
    pretrain_steps: usize,
    /// Epochs of the hierarchical model: pooling and head on the frozen encoder's chunk
    /// vectors, computed once (`train --freeze-base`).
    #[arg(long, default_value_t = 30)]
    epochs: usize,
    /// Epochs of the single-chunk baseline, whose encoder layers are fine-tuned with its head
    /// (the hierarchical model's encoder stays frozen): it gets every advantage but the text it
    /// cannot see.
    #[arg(long, default_value_t = 6)]
    baseline_epochs: usize,
    /// Seed of the documents and of every training run.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// The classifiers compared.
const MODELS: [(&str, &str); 2] =
    [("hierarchical", "hierarchical (every chunk)"), ("sequence", "single-chunk baseline (first chunk)")];

/// Runs `longread quickstart`.
pub fn run(args: QuickstartArgs, quiet: bool) -> Result<()> {
    if args.out.exists() {
        bail!("{} already exists; choose another --out", args.out.display());
    }
    if args.min_chunks == 0 || args.min_chunks > args.max_chunks {
        bail!("--min-chunks must be at least 1 and at most --max-chunks");
    }
    let least = [
        ("--chunk-size", args.chunk_size, 16),
        ("--train-docs", args.train_docs, 30),
        ("--test-docs", args.test_docs, 3),
        ("--epochs", args.epochs, 1),
        ("--baseline-epochs", args.baseline_epochs, 1),
        ("--pretrain-steps", args.pretrain_steps, 1),
    ];
    if let Some((flag, value, least)) = least.into_iter().find(|&(_, value, least)| value < least) {
        bail!("{flag} {value}: must be at least {least}");
    }
    let tour = Tour { args, quiet, started: Instant::now() };
    let (test, corpus) = tour.data()?;
    let encoder = tour.encoder(&corpus)?;
    let tokenizer =
        TextTokenizer::from_file(longread_model::Checkpoint::open(Path::new(&encoder))?.files.require_tokenizer()?)?;
    let chunks = chunk_counts(&tokenizer, tour.args.chunk_size, &test)?;
    tour.describe_chunks(&chunks);
    tour.models(&encoder)?;
    tour.evaluate(&test, &encoder, &chunks)
}

/// The quickstart's steps, each printing the commands it runs.
struct Tour {
    args: QuickstartArgs,
    quiet: bool,
    started: Instant,
}

impl Tour {
    /// A path inside the output directory, as text for a command line.
    fn path(&self, name: &str) -> String {
        self.args.out.join(name).display().to_string()
    }

    /// Prints a step's title with the time so far.
    fn announce(&self, title: &str) {
        if !self.quiet {
            eprintln!("\n== {title} ({:.0} s)", self.started.elapsed().as_secs_f64());
        }
    }

    /// Prints and runs one `longread …` command line.
    fn run(&self, line: Vec<String>) -> Result<()> {
        if !self.quiet {
            eprintln!("$ longread {}", line.join(" "));
        }
        crate::run_command_line(&line, self.quiet).with_context(|| format!("longread {}", line[0]))?;
        Ok(())
    }

    /// Step 1: the synthetic training and test transcripts, the report's documents and the
    /// tokenizer corpus; returns the test documents and the corpus path.
    fn data(&self) -> Result<(Vec<Transcript>, PathBuf)> {
        let (args, out) = (&self.args, &self.args.out);
        self.announce("1/5 synthetic data");
        // About 1.2 tokens per word with the tokenizers used here; n chunks hold
        // (chunk_size − 2) + (n − 1)·step tokens, consecutive ones `step` = chunk_size − 2 − stride
        // apart (stride = chunk_size / 4).
        let (window, step) = (args.chunk_size - 2, args.chunk_size - 2 - args.chunk_size / 4);
        let words = |chunks: usize| ((window + (chunks - 1) * step) as f64 / 1.2) as usize;
        let (min_words, max_words) = (words(args.min_chunks), words(args.max_chunks));
        let train = transcripts(args.train_docs, min_words, max_words, "train-", args.seed);
        let test = transcripts(args.test_docs, min_words, max_words, "test-", args.seed.wrapping_add(1));
        std::fs::create_dir_all(out.join("data")).with_context(|| format!("creating {}", out.display()))?;
        write_jsonl(&out.join("data/train.jsonl"), &train)?;
        write_jsonl(&out.join("data/test.jsonl"), &test)?;
        // The report shows one test document per label whose passage is far from the start.
        let shown: Vec<&Transcript> = LABELS
            .iter()
            .filter_map(|l| test.iter().filter(|t| t.label == *l).max_by_key(|t| (t.passage_sentence, t.id.clone())))
            .collect();
        write_jsonl(&out.join("data/report.jsonl"), shown.iter().copied())?;
        let corpus = out.join("data/corpus.txt");
        std::fs::write(&corpus, train.iter().map(|t| t.text.as_str()).collect::<Vec<_>>().join("\n") + "\n")
            .with_context(|| format!("writing {}", corpus.display()))?;
        if !self.quiet {
            eprintln!(
                "wrote {} training and {} test transcripts to {} (labels {}; one passage per document carries the \
                 rating, anywhere)",
                train.len(),
                test.len(),
                self.path("data"),
                LABELS.join(", ")
            );
        }
        Ok((test, corpus))
    }

    /// Step 2: the encoder given, or a tokenizer and a tiny RoBERTa pretrained on the corpus.
    fn encoder(&self, corpus: &Path) -> Result<String> {
        let args = &self.args;
        if let Some(dir) = &args.encoder {
            self.announce("2/5 encoder: the pretrained one given (no tokenizer training or pretraining)");
            return Ok(dir.display().to_string());
        }
        self.announce("2/5 tokenizer and a tiny RoBERTa pretrained with MLM");
        let corpus = corpus.display().to_string();
        self.run(
            strings(&["tokenizer", "train", "--corpus", &corpus])
                .chain(strings(&["--kind", "bpe", "--vocab-size", "1000", "--out", &self.path("tokenizer")]))
                .collect(),
        )?;
        let steps = args.pretrain_steps;
        self.run(
            strings(&["pretrain", "--corpus", &corpus, "--tokenizer", &self.path("tokenizer")])
                .chain(strings(&["--preset", "tiny", "--out", &self.path("encoder"), "--seq-len"]))
                .chain([args.chunk_size.to_string(), "--max-steps".into(), steps.to_string()])
                .chain(strings(&["--batch-size", "16", "--lr", "1e-3", "--warmup-steps"]))
                .chain([(steps / 10).to_string(), "--eval-every".into(), steps.to_string()])
                .chain(["--seed".into(), args.seed.to_string()])
                .collect(),
        )?;
        Ok(self.path("encoder"))
    }

    /// Says how long the test documents are and how often the passage is in the first chunk.
    fn describe_chunks(&self, chunks: &[(usize, bool)]) {
        if !self.quiet {
            eprintln!(
                "test documents have {}–{} chunks of {} tokens (mean {:.1}); the rating passage lies in the first \
                 chunk of {} of {}",
                chunks.iter().map(|c| c.0).min().unwrap_or(0),
                chunks.iter().map(|c| c.0).max().unwrap_or(0),
                self.args.chunk_size,
                chunks.iter().map(|c| c.0).sum::<usize>() as f64 / chunks.len().max(1) as f64,
                chunks.iter().filter(|c| c.1).count(),
                chunks.len()
            );
        }
    }

    /// Steps 3 and 4: `init` and `train` of the hierarchical model (encoder frozen) and of the
    /// single-chunk baseline (fine-tuned whole).
    fn models(&self, encoder: &str) -> Result<()> {
        let args = &self.args;
        let labels = LABELS.join(",");
        let chunk_size = args.chunk_size.to_string();
        let seed = args.seed.to_string();
        let train_data = self.path("data/train.jsonl");
        for (k, (arch, title)) in MODELS.iter().enumerate() {
            self.announce(&format!("{}/5 {title}", k + 3));
            let init = self.path(&format!("{arch}-init"));
            let mut init_line = strings(&["init", "--arch", arch, "--encoder", encoder, "--labels", &labels])
                .chain(strings(&["--chunk-size", &chunk_size, "--out", &init, "--seed", &seed]))
                .collect::<Vec<_>>();
            if *arch == "hierarchical" {
                let stride = (args.chunk_size / 4).to_string();
                init_line.extend(strings(&["--stride", &stride, "--max-chunks", "0", "--chunk-pooling", "mean"]));
            }
            self.run(init_line)?;
            let schedule: Vec<String> = if *arch == "hierarchical" {
                strings(&["--freeze-base", "--head-lr", "1e-2", "--epochs"]).chain([args.epochs.to_string()]).collect()
            } else {
                // A pretrained encoder takes the usual fine-tuning rate; the tiny one learns faster.
                let lr = if args.encoder.is_some() { "5e-5" } else { "1e-3" };
                strings(&["--lr", lr, "--head-lr", "1e-3", "--epochs"])
                    .chain([args.baseline_epochs.to_string()])
                    .collect()
            };
            self.run(
                strings(&["train", "--model", &init, "--train", &train_data, "--out", &self.path(arch)])
                    .chain(schedule)
                    .chain(strings(&["--batch-size", "8", "--seed", &seed]))
                    .collect(),
            )?;
            std::fs::remove_dir_all(&init).with_context(|| format!("removing {init}"))?;
        }
        Ok(())
    }

    /// Step 5: both models on the test documents, the report, summary.json and the table.
    fn evaluate(&self, test: &[Transcript], encoder: &str, chunks: &[(usize, bool)]) -> Result<()> {
        let out = &self.args.out;
        self.announce("5/5 evaluation on the test documents");
        let test_data = out.join("data/test.jsonl");
        let mut reports: Vec<Report> = Vec::new();
        for (arch, _) in MODELS {
            let mut by_task = evaluate_file(&out.join(arch), &test_data, QUICKSTART_EVAL, None, self.quiet)?;
            reports.push(by_task.remove(0).report);
        }
        self.run(
            strings(&["report", "--model", &self.path("hierarchical"), "--input", &self.path("data/report.jsonl")])
                .chain(strings(&["--out", &self.path("report.html")]))
                .collect(),
        )?;
        // The baseline sees the passage only when it lies in the first chunk; elsewhere it can at
        // best guess (a third right).
        let seen = chunks.iter().filter(|c| c.1).count();
        let ceiling = (seen as f64 + (chunks.len() - seen) as f64 / LABELS.len() as f64) / chunks.len() as f64;
        let summary = serde_json::json!({
            "chunk_size": self.args.chunk_size,
            "test_documents": test.len(),
            "passage_in_first_chunk": seen,
            "baseline_best_possible_accuracy": ceiling,
            "encoder": encoder,
            "seconds": self.started.elapsed().as_secs_f64().round(),
            "models": MODELS.iter().zip(&reports).map(|((arch, title), r)| serde_json::json!({
                "model": arch, "description": title, "accuracy": r.accuracy, "macro_f1": r.macro_f1,
            })).collect::<Vec<_>>(),
        });
        crate::io::write_atomically(&out.join("summary.json"), format!("{summary:#}\n").as_bytes())?;
        let mut table = String::from("\nmodel                                   accuracy   macro-F1\n");
        for ((_, title), r) in MODELS.iter().zip(&reports) {
            table += &format!("{title:<38} {:>9.3} {:>10.3}\n", r.accuracy, r.macro_f1);
        }
        table += &format!("(the best a first-chunk reader can do here: accuracy {ceiling:.3})\n");
        print!("{table}");
        if !self.quiet {
            eprintln!(
                "\nfinished in {:.0} s: models in {} and {}, attention over chunks in {}, numbers in {}",
                self.started.elapsed().as_secs_f64(),
                self.path("hierarchical"),
                self.path("sequence"),
                self.path("report.html"),
                self.path("summary.json")
            );
        }
        std::io::stdout().flush().ok();
        Ok(())
    }
}

fn strings<'a>(items: &'a [&'a str]) -> impl Iterator<Item = String> + 'a {
    items.iter().map(|s| s.to_string())
}

/// Writes `{"id", "text", "label"}` lines.
fn write_jsonl<'a>(path: &Path, docs: impl IntoIterator<Item = &'a Transcript>) -> Result<()> {
    let mut text = String::new();
    for d in docs {
        text += &serde_json::json!({"id": d.id, "text": d.text, "label": d.label}).to_string();
        text.push('\n');
    }
    crate::io::write_atomically(path, text.as_bytes())
}

/// Per document: chunks of `chunk_size` tokens (stride chunk_size/4), and whether the rating
/// passage lies within the first chunk.
fn chunk_counts(tokenizer: &TextTokenizer, chunk_size: usize, docs: &[Transcript]) -> Result<Vec<(usize, bool)>> {
    let config = ChunkingConfig { chunk_size, stride: chunk_size / 4, max_chunks: 0, selection: ChunkSelection::Head };
    let chunker = Chunker::new(tokenizer.clone(), config)?;
    docs.iter()
        .map(|d| {
            let chunked = chunker.chunk(&d.text)?;
            let first_end = chunked.chunks.first().map_or(0, |c| c.end);
            Ok((chunked.chunks.len(), d.passage.end <= first_end))
        })
        .collect()
}
