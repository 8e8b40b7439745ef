//! The one library API over every model kind: `Classifier` loads hierarchical, multi-task and
//! HAN directories alike, classifies texts with per-document errors, and a document's scores do
//! not depend on the other documents it is batched with.

#[path = "../../longread-model/tests/common.rs"]
mod common;

use common::{fixture, hier_documents as documents, max_diff};
use longread_classifier::{Classifier, ClassifierOptions};
use longread_model::Precision;

#[test]
fn a_document_alone_and_amid_others_gets_the_same_scores() {
    for model in ["hier/roberta-attention", "hier/bert-multihead", "hier/trained-multitask"] {
        // A small token budget: the batch mixes chunks of several documents.
        let options = ClassifierOptions { max_batch_tokens: Some(64), ..ClassifierOptions::default() };
        let classifier = Classifier::load(&fixture(model), options).unwrap();
        let docs = documents();
        let texts: Vec<&str> = docs.iter().map(String::as_str).collect();
        let together = classifier.classify(&texts).unwrap();
        assert_eq!(together.len(), texts.len());
        for (text, batched) in texts.iter().zip(&together) {
            let alone = classifier.classify(&[text]).unwrap().remove(0).unwrap();
            let batched = batched.as_ref().unwrap();
            assert!(max_diff(alone.probabilities(), batched.probabilities()) <= 1e-6, "{model}");
            assert!(max_diff(&alone.logits, &batched.logits) <= 1e-6, "{model}");
            let attention = |p: &longread_classifier::Prediction| -> Vec<f32> {
                p.parts.chunks().unwrap().iter().map(|c| c.attention).collect()
            };
            assert!(max_diff(&attention(&alone), &attention(batched)) <= 1e-6, "{model}");
            assert_eq!(alone.label, batched.label);
            assert_eq!(alone.tasks.is_some(), classifier.tasks().len() > 1, "{model}");
        }
    }
}

/// A group of documents holds at least one full encoder batch: 256 chunks by default, as many
/// as the token budget holds where that is more (a GPU's 256,000 tokens: 500 chunks of 512);
/// with such groups many documents still come back in order with their own scores.
#[test]
fn a_group_fills_the_encoder_batch_and_changes_no_score() {
    let model = fixture("hier/roberta-attention");
    let small = Classifier::load(&model, ClassifierOptions::default()).unwrap();
    assert_eq!(small.group_units(), 256, "2,048 tokens hold fewer than 256 chunks");
    let (chunk, _) = small.chunk_layout().unwrap();
    let budget = 600 * chunk;
    let large = ClassifierOptions { max_batch_tokens: Some(budget), ..ClassifierOptions::default() };
    let large = Classifier::load(&model, large).unwrap();
    assert_eq!(large.group_units(), 600, "{budget} tokens hold 600 chunks of {chunk}");
    let docs = documents();
    let texts: Vec<String> = (0..120).map(|i| format!("{} {}", docs[i % docs.len()], "word ".repeat(i % 50))).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let (a, b) = (small.classify(&refs).unwrap(), large.classify(&refs).unwrap());
    assert_eq!(a.len(), b.len());
    for (i, (a, b)) in a.iter().zip(&b).enumerate() {
        let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
        assert!(max_diff(&a.logits, &b.logits) <= 1e-5, "document {i}");
        assert_eq!(a.label, b.label, "document {i}");
    }
}

/// Many documents (several cutting windows and encoder groups, bad ones among them): results
/// come back one per document, in input order, each as the document alone gets it, while the
/// next documents are cut on another thread.
#[test]
fn many_documents_come_back_in_order_with_their_own_scores() {
    let classifier = Classifier::load(&fixture("hier/roberta-attention"), ClassifierOptions::default()).unwrap();
    let docs = documents();
    let mut texts: Vec<String> =
        (0..150).map(|i| format!("{} {}", docs[i % docs.len()], "word ".repeat(i % 40))).collect();
    for bad in [0, 37, 149] {
        texts[bad] = String::new();
    }
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let all = classifier.classify(&refs).unwrap();
    assert_eq!(all.len(), texts.len());
    for (i, (text, result)) in refs.iter().zip(&all).enumerate() {
        let alone = classifier.classify(&[text]).unwrap().remove(0);
        match (alone, result) {
            (Ok(a), Ok(b)) => assert!(max_diff(&a.logits, &b.logits) <= 1e-6, "document {i}"),
            (Err(a), Err(b)) => assert_eq!(a.message, b.message, "document {i}"),
            (a, b) => panic!("document {i}: alone {a:?}, amid others {b:?}"),
        }
    }
    assert!(all[37].is_err() && all[36].is_ok(), "the empty document fails alone");
}

#[test]
fn one_bad_document_fails_alone() {
    let classifier = Classifier::load(&fixture("hier/roberta-attention"), ClassifierOptions::default()).unwrap();
    let results = classifier.classify(&["Rain is expected.", "  \n", "The committee met."]).unwrap();
    assert!(results[0].is_ok() && results[2].is_ok());
    assert!(results[1].as_ref().unwrap_err().message.contains("empty or whitespace-only"));
    let p = results[0].as_ref().unwrap();
    assert_eq!(classifier.evidence_unit(), "chunk");
    assert_eq!(p.label, classifier.labels()[p.label_index()]);
    assert!((p.probabilities().iter().sum::<f32>() - 1.0).abs() < 1e-5);
    assert_eq!(p.top_evidence().unwrap().unit, "chunk");
}

#[test]
fn a_han_loads_through_the_same_api_and_shows_sentences() {
    let classifier = Classifier::load(&fixture("han"), ClassifierOptions::default()).unwrap();
    assert_eq!(classifier.evidence_unit(), "sentence");
    assert_eq!(classifier.tasks().len(), 1);
    let results = classifier.classify(&["The film was long. The ending was good.", ""]).unwrap();
    let p = results[0].as_ref().unwrap();
    let sentences = p.parts.sentences().unwrap();
    assert!(p.parts.chunks().is_none() && !sentences.is_empty());
    assert!(matches!(p.parts, longread_classifier::Parts::Sentences { total_sentences: 2, .. }));
    let top = p.top_evidence().unwrap();
    assert_eq!((top.unit, top.count), ("sentence", sentences.len()));
    assert!(results[1].as_ref().unwrap_err().message.contains("no words"));
    // Serialised like `predict` writes it: sentences with words, no chunks.
    let json = serde_json::to_value(p).unwrap();
    assert!(json["sentences"][0]["words"].is_array() && json.get("chunks").is_none());
}

#[test]
fn reduced_precision_is_refused_for_a_han_and_bad_options_are_errors() {
    let int8 = ClassifierOptions { precision: Some(Precision::Int8), ..ClassifierOptions::default() };
    let err = Classifier::load(&fixture("han"), int8).unwrap_err().to_string();
    assert!(err.contains("is a HAN"), "{err}");
    let zero = ClassifierOptions { max_batch_tokens: Some(0), ..ClassifierOptions::default() };
    let err = Classifier::load(&fixture("hier/roberta-attention"), zero).unwrap_err().to_string();
    assert!(err.contains("max_batch_tokens"), "{err}");
    let err = Classifier::load(&fixture("tiny-bert"), ClassifierOptions::default()).unwrap_err().to_string();
    assert!(err.contains("longread init"), "{err}");
}

#[test]
fn the_vector_cache_gives_the_same_scores_and_is_shared_by_models_on_one_encoder() {
    let docs = documents();
    let texts: Vec<&str> = docs.iter().map(String::as_str).collect();
    let cache = tempfile::tempdir().unwrap();
    let files = || std::fs::read_dir(cache.path()).unwrap().count();
    let scores = |model: &str, cached: bool| -> Vec<Vec<f32>> {
        let mut classifier = Classifier::load(&fixture(model), ClassifierOptions::default()).unwrap();
        if cached {
            classifier.set_vector_cache(cache.path()).unwrap();
        }
        classifier.classify(&texts).unwrap().into_iter().map(|r| r.unwrap().logits).collect()
    };
    let plain = scores("hier/bert-attention", false);
    assert_eq!(scores("hier/bert-attention", true), plain, "a miss: encoded, then stored");
    assert_eq!(files(), texts.len());
    assert_eq!(scores("hier/bert-attention", true), plain, "a hit");
    // Another head on the same encoder and chunking (CLS vectors) reads the same vectors.
    assert_eq!(scores("hier/bert-first", true), scores("hier/bert-first", false));
    assert_eq!(files(), texts.len());
    // Mean-pooled chunk vectors, or another encoder, are other keys.
    assert_eq!(scores("hier/bert-max", true), scores("hier/bert-max", false));
    assert_eq!(files(), 2 * texts.len());
    scores("hier/roberta-attention", true);
    assert_eq!(files(), 3 * texts.len());
    // A damaged entry is a miss, recomputed.
    for entry in std::fs::read_dir(cache.path()).unwrap() {
        std::fs::write(entry.unwrap().path(), b"LRVEC001 damaged").unwrap();
    }
    assert_eq!(scores("hier/bert-attention", true), plain);
}

/// The chunk-vector cache is written group by group, so that an interrupt while it fills keeps
/// what was encoded (written only after every document of a split, an interrupt 25 minutes into
/// filling it lost all of it): files appear while the encoder is still working.
#[test]
fn the_vector_cache_fills_group_by_group_while_encoding() {
    use candle_core::Device;
    use longread_model::hierarchical::{HierarchicalClassifier, VectorCache};
    use longread_text::{Chunker, TextTokenizer};

    let model = HierarchicalClassifier::load(&fixture("hier/bert-attention"), false, &Device::Cpu).unwrap();
    let chunker =
        Chunker::new(TextTokenizer::from_file(model.tokenizer_path()).unwrap(), model.config().longread.chunking())
            .unwrap();
    let base = documents();
    // Distinct token ids for each (the tiny vocabulary maps digits to [UNK]).
    let texts: Vec<String> =
        (0..60).map(|i| format!("{}{}", "rain ".repeat(i / base.len() + 1), base[i % base.len()])).collect();
    let chunked: Vec<_> = texts.iter().map(|t| chunker.chunk(t).unwrap()).collect();
    let refs: Vec<_> = chunked.iter().collect();
    let total_chunks: usize = chunked.iter().map(|d| d.chunks.len()).sum();
    assert!(total_chunks > 2 * 64, "{total_chunks} chunks: more than two cache groups");
    let dir = tempfile::tempdir().unwrap();
    let cache = VectorCache::open(dir.path(), &model, "f32").unwrap();
    let files = || std::fs::read_dir(dir.path()).unwrap().count();
    let mut seen_midway = Vec::new();
    let vectors =
        model.encode_documents_cached(&refs, 64, &Device::Cpu, Some(&cache), |_| seen_midway.push(files())).unwrap();
    assert_eq!(vectors.len(), texts.len());
    assert_eq!(files(), texts.len());
    assert!(
        seen_midway.iter().any(|&n| n > 0 && n < texts.len()),
        "vectors were stored while encoding went on: {seen_midway:?}"
    );
    // And they are the vectors a plain pass computes.
    let plain = model.encode_documents(&refs, 64, &Device::Cpu, |_| {}).unwrap();
    for (a, b) in vectors.iter().zip(&plain) {
        let diff = a.sub(b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
        assert!(diff <= 1e-6, "{diff}");
    }
}

/// With `max_chunks` 0, a long text held cut into chunks (every window's ids) before the encoder
/// saw any of it costs memory in proportion to its length. Texts over 1 MiB are streamed:
/// windows are tokenized as the encoder needs them, group by group. The prediction equals the
/// one of the document cut first (same chunks, spans and token count; logits within batching
/// noise), and documents around it keep their order and their own results.
#[test]
fn a_long_text_read_whole_is_streamed_with_the_prediction_of_cutting_it_first() {
    use longread_text::{ChunkSelection, Chunker, ChunkingConfig, TextTokenizer};
    let dir = tempfile::tempdir().unwrap();
    let source = fixture("hier/roberta-attention");
    for file in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(source.join(file), dir.path().join(file)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(source.join("config.json")).unwrap()).unwrap();
    config["longread"]["max_chunks"] = 0.into();
    config["longread"]["chunk_size"] = 64.into();
    config["longread"]["stride"] = 16.into();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();

    let docs = documents();
    let mut long = String::new();
    while long.len() <= 1 << 20 {
        long.push_str(&docs[long.len() % docs.len()]);
        long.push(' ');
    }
    let classifier = Classifier::load(dir.path(), ClassifierOptions::default()).unwrap();
    let texts = [docs[0].as_str(), long.as_str(), "", docs[1].as_str()];
    let results = classifier.classify(&texts).unwrap();
    assert!(results[2].is_err(), "the empty text keeps its own error");
    for i in [0, 3] {
        let alone = classifier.classify(&[texts[i]]).unwrap().remove(0).unwrap();
        assert!(max_diff(&alone.logits, &results[i].as_ref().unwrap().logits) <= 1e-6, "document {i}");
    }

    let chunker = Chunker::new(
        TextTokenizer::from_file(&dir.path().join("tokenizer.json")).unwrap(),
        ChunkingConfig { chunk_size: 64, stride: 16, max_chunks: 0, selection: ChunkSelection::Head },
    )
    .unwrap();
    let cut = chunker.chunk(&long).unwrap();
    assert!(cut.chunks.len() > 1000, "{} chunks: many encoder groups", cut.chunks.len());
    let reference = classifier.classify_chunked(vec![cut]).unwrap().remove(0).unwrap();
    let streamed = results[1].as_ref().unwrap();
    assert_eq!(streamed.tokens, reference.tokens);
    assert_eq!(streamed.label, reference.label);
    assert!(max_diff(&streamed.logits, &reference.logits) <= 1e-5);
    let spans = |p: &longread_classifier::Prediction| -> Vec<(usize, usize, usize)> {
        p.parts.chunks().unwrap().iter().map(|c| (c.index, c.start, c.end)).collect()
    };
    assert_eq!(spans(streamed), spans(&reference), "the same chunks, in order");
    let attention = |p: &longread_classifier::Prediction| -> Vec<f32> {
        p.parts.chunks().unwrap().iter().map(|c| c.attention).collect()
    };
    assert!(max_diff(&attention(streamed), &attention(&reference)) <= 1e-5);
}

/// Occlusion: each chunk's value is the predicted label's probability minus the probability
/// the model gives the document's other chunks, scored on their own by the model's head —
/// for every pooling strategy, ordinal heads and a multi-task model's primary task; nothing
/// else in the prediction changes, and a one-chunk document has none.
#[test]
fn occlusion_is_the_labels_probability_lost_without_each_chunk() {
    use longread_model::hierarchical::HierarchicalClassifier;
    use longread_text::{Chunker, TextTokenizer};
    let models = [
        "hier/bert-attention",
        "hier/bert-first",
        "hier/bert-max",
        "hier/bert-max-logits",
        "hier/bert-max-logits-ordinal",
        "hier/bert-mean",
        "hier/bert-multihead",
        "hier/bert-multihead-top2",
        "hier/bert-ordinal",
        "hier/bert-top2-sharp",
        "hier/trained-multitask",
    ];
    let docs = documents();
    let texts: Vec<&str> = docs.iter().map(String::as_str).collect();
    let mut checked = 0;
    for model in models {
        let dir = fixture(model);
        let plain = Classifier::load(&dir, ClassifierOptions::default()).unwrap().classify(&texts).unwrap();
        let options = ClassifierOptions { occlusion: true, ..ClassifierOptions::default() };
        let occluded = Classifier::load(&dir, options).unwrap().classify(&texts).unwrap();
        let head = HierarchicalClassifier::load(&dir, false, &candle_core::Device::Cpu).unwrap();
        let chunker =
            Chunker::new(TextTokenizer::from_file(head.tokenizer_path()).unwrap(), head.config().longread.chunking())
                .unwrap();
        for ((text, plain), occluded) in texts.iter().zip(&plain).zip(&occluded) {
            let (plain, occluded) = (plain.as_ref().unwrap(), occluded.as_ref().unwrap());
            let chunks = occluded.parts.chunks().unwrap();
            let mut without = occluded.clone();
            if let longread_classifier::Parts::Chunks { chunks } = &mut without.parts {
                chunks.iter_mut().for_each(|c| (c.occlusion, c.without) = (None, None));
            }
            assert_eq!(&without, plain, "{model}: occlusion changes nothing else");
            if chunks.len() == 1 {
                assert_eq!(chunks[0].occlusion, None, "{model}: one chunk, nothing to leave out");
                continue;
            }
            let chunked = chunker.chunk(text).unwrap();
            let vectors = head.encode_documents(&[&chunked], 2048, &candle_core::Device::Cpu, |_| {}).unwrap();
            let label = occluded.scores.labels.iter().position(|l| *l == occluded.label).unwrap();
            let p = occluded.probabilities()[label];
            for (i, chunk) in chunks.iter().enumerate() {
                let others: Vec<u32> = (0..chunks.len() as u32).filter(|&c| c != i as u32).collect();
                let others = candle_core::Tensor::new(others.as_slice(), &candle_core::Device::Cpu).unwrap();
                let alone = head.score(&vectors[0].index_select(&others, 0).unwrap()).unwrap();
                let expected = p - alone.probabilities[label];
                let got = chunk.occlusion.expect("every chunk of a document of several");
                assert!((got - expected).abs() <= 1e-5, "{model}, chunk {i}: {got} against {expected}");
                checked += 1;
            }
        }
    }
    assert!(checked > 50, "{checked} chunks checked");
}

/// A calibrated model's occlusion is of its calibrated probabilities; models occlusion cannot
/// read chunk by chunk are refused by name.
#[test]
fn occlusion_follows_the_calibration_and_is_refused_where_there_are_no_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("calibrated");
    std::fs::create_dir(&dir).unwrap();
    for entry in std::fs::read_dir(fixture("hier/bert-attention")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    let options = ClassifierOptions { occlusion: true, ..ClassifierOptions::default() };
    let text = documents().into_iter().max_by_key(String::len).unwrap();
    let raw = Classifier::load(&dir, options).unwrap().classify(&[&text]).unwrap().remove(0).unwrap();
    std::fs::write(dir.join("calibration.json"), r#"{"temperature": 2.5, "chosen_by": "a test"}"#).unwrap();
    let calibrated = Classifier::load(&dir, options).unwrap().classify(&[&text]).unwrap().remove(0).unwrap();
    let t = longread_classifier::decision::Temperature::single(2.5, String::new());
    let label = calibrated.scores.labels.iter().position(|l| *l == calibrated.label).unwrap();
    let (raw_chunks, chunks) = (raw.parts.chunks().unwrap(), calibrated.parts.chunks().unwrap());
    assert!(chunks.len() > 1);
    let raw_label = raw.scores.labels.iter().position(|l| *l == raw.label).unwrap();
    for (r, c) in raw_chunks.iter().zip(chunks) {
        // The probabilities without the chunk as the model gives them, then tempered.
        let row = r.without.as_ref().unwrap();
        assert!((r.occlusion.unwrap() - (raw.probabilities()[raw_label] - row[raw_label])).abs() <= 1e-6);
        let expected = calibrated.probabilities()[label] - t.apply(row)[label];
        assert!((c.occlusion.unwrap() - expected).abs() <= 1e-5, "{} against {expected}", c.occlusion.unwrap());
    }
    for (model, what) in [("han", "is a HAN"), ("seq/bert", "is a single-chunk sequence classifier")] {
        let err = Classifier::load(&fixture(model), options).unwrap_err().to_string();
        assert!(
            err.contains("occlusion reads a hierarchical model without each of its chunks") && err.contains(what),
            "{err}"
        );
    }
}
