//! `init_run`: the new classifier every front (CLI, Python) builds from the same settings.

use std::path::{Path, PathBuf};

use candle_core::Device;
use longread_model::hierarchical::{Architecture, ChunkPooling, HierarchicalClassifier, PoolingStrategy};
use longread_text::ChunkSelection;
use longread_train::run::init::{describe, init_run, InitSpec};
use longread_train::run::Arch;

fn encoder() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-bert").display().to_string()
}

fn spec(out: &Path) -> InitSpec {
    InitSpec {
        encoder: encoder(),
        labels: vec!["general".into(), " teen".into(), "mature".into()],
        out: out.to_path_buf(),
        arch: Arch::Hierarchical,
        pooling: PoolingStrategy::Attention,
        attention_heads: 1,
        attention_hidden_size: 16,
        attention_top_k: 2,
        attention_temperature: 0.5,
        ordinal: false,
        multi_label: false,
        chunk_size: 64,
        stride: Some(16),
        max_chunks: 5,
        chunk_selection: ChunkSelection::Spread,
        chunk_pooling: ChunkPooling::Mean,
        seed: 7,
        given: vec![],
    }
}

#[test]
fn writes_a_classifier_with_the_settings_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m");
    let made = init_run(&spec(&out)).unwrap();
    assert_eq!(made.labels(), ["general", "teen", "mature"], "labels are trimmed, in order");
    let loaded = HierarchicalClassifier::load(&out, false, &Device::Cpu).unwrap();
    let section = &loaded.config().longread;
    assert_eq!(section.architecture, Architecture::Hierarchical);
    assert_eq!((section.chunk_size, section.stride, section.max_chunks), (64, 16, 5));
    assert_eq!((section.attention_top_k, section.attention_temperature), (2, 0.5));
    assert_eq!(section.chunk_selection, ChunkSelection::Spread);
    assert_eq!(section.chunk_pooling, ChunkPooling::Mean);
    let said = describe(&loaded);
    assert!(
        said.starts_with(
            "3 labels: general, teen, mature, pooling attention over the top 2 chunks, chunks of 64 tokens"
        ),
        "{said}"
    );

    // Same seed, same weights; the directory is never overwritten.
    let again = dir.path().join("again");
    init_run(&spec(&again)).unwrap();
    for file in ["model.safetensors", "config.json"] {
        let a = std::fs::read(out.join(file)).unwrap();
        assert_eq!(a, std::fs::read(again.join(file)).unwrap(), "{file} differs for the same seed");
    }
    let err = init_run(&spec(&out)).unwrap_err().to_string();
    assert!(err.contains("exists"), "{err}");
}

#[test]
fn the_sequence_baseline_reads_the_first_chunk_in_transformers_layout() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("seq");
    let model = init_run(&InitSpec { arch: Arch::Sequence, chunk_size: 100_000, ..spec(&out) }).unwrap();
    let section = &model.config().longread;
    assert_eq!(section.architecture, Architecture::Sequence);
    assert!(section.chunk_size <= 512, "capped at the encoder's positions: {}", section.chunk_size);
    assert!(describe(&model).contains("single chunk"), "{}", describe(&model));
}

#[test]
fn refuses_settings_that_do_not_apply_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m");
    let refused = |s: InitSpec, needle: &str| {
        let err = init_run(&s).unwrap_err().to_string();
        assert!(err.contains(needle), "expected {needle:?} in {err:?}");
        assert!(!out.exists(), "nothing written on refusal");
    };
    refused(InitSpec { labels: vec!["a".into(), "a ".into()], ..spec(&out) }, "contains a name twice");
    refused(InitSpec { labels: vec!["a\u{1b}[31m".into(), "b".into()], ..spec(&out) }, "holds a control character");
    refused(InitSpec { labels: vec!["a".into()], ..spec(&out) }, "at least two");
    refused(InitSpec { labels: vec!["a".into(), " ".into()], ..spec(&out) }, "name 2 of 2 is empty");
    refused(InitSpec { arch: Arch::Han, ..spec(&out) }, "--arch han is not built on an encoder");
    refused(InitSpec { arch: Arch::Bow, ..spec(&out) }, "--arch bow is not built on an encoder");
    refused(InitSpec { attention_temperature: 0.0, ..spec(&out) }, "--attention-temperature 0: must be above 0");
    refused(
        InitSpec { pooling: PoolingStrategy::Mean, given: vec!["attention_top_k".into()], ..spec(&out) },
        "--attention-top-k applies only to --pooling attention, multihead or label-attention",
    );
    refused(
        InitSpec { given: vec!["attention_heads".into()], ..spec(&out) },
        "--attention-heads applies only to --pooling multihead",
    );
    refused(InitSpec { encoder: "/nonexistent/encoder".into(), ..spec(&out) }, "/nonexistent/encoder");
}
