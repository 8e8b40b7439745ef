//! The encoder against transformers' `BertModel` / `RobertaModel` (fixtures from
//! `scripts/make_encoder_fixtures.py`): same token ids, same hidden states to 1e-4.

mod common;

use candle_core::{DType, Device, Tensor};
use common::{expected, fixture, max_abs_diff};
use longread_model::{Checkpoint, LoadOptions, Mode};
use longread_text::{pad_batch, TextTokenizer};

const FIXTURES: [&str; 3] = ["tiny-bert", "tiny-roberta", "tiny-bert-sharded"];

fn texts(name: &str) -> Vec<String> {
    serde_json::from_str(&std::fs::read_to_string(fixture(name).join("texts.json")).unwrap()).unwrap()
}

#[test]
fn tokenizer_ids_match_the_reference() {
    for name in FIXTURES {
        let exp = expected(name);
        let checkpoint = Checkpoint::open(&fixture(name)).unwrap();
        let tokenizer = TextTokenizer::from_file(&fixture(name).join("tokenizer.json")).unwrap();
        let texts = texts(name);
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let encoded = tokenizer.encode_batch(&refs).unwrap();
        let seqs: Vec<&[u32]> = encoded.iter().map(|e| e.ids.as_slice()).collect();
        let (ids, mask, len) = pad_batch(&seqs, checkpoint.config.pad_token_id);
        let want_ids = exp["input_ids"].to_dtype(DType::U32).unwrap();
        let want_mask = exp["attention_mask"].to_dtype(DType::U32).unwrap();
        assert_eq!(
            Tensor::from_vec(ids, (refs.len(), len), &Device::Cpu).unwrap().to_vec2::<u32>().unwrap(),
            want_ids.to_vec2::<u32>().unwrap(),
            "{name}: ids"
        );
        assert_eq!(
            Tensor::from_vec(mask, (refs.len(), len), &Device::Cpu).unwrap().to_vec2::<u32>().unwrap(),
            want_mask.to_vec2::<u32>().unwrap(),
            "{name}: mask"
        );
    }
}

#[test]
fn hidden_states_match_transformers_on_a_padded_batch() {
    for name in FIXTURES {
        let exp = expected(name);
        let checkpoint = Checkpoint::open(&fixture(name)).unwrap();
        let encoder = checkpoint.load_encoder(&LoadOptions::default(), &Device::Cpu).unwrap();
        let ids = exp["input_ids"].to_dtype(DType::U32).unwrap();
        let mask = exp["attention_mask"].to_dtype(DType::U32).unwrap();
        let hidden = encoder.forward(&ids, &mask, Mode::Eval).unwrap();
        let diff = max_abs_diff(&hidden, &exp["last_hidden_state"]);
        assert!(diff <= 1e-4, "{name}: max abs diff {diff}");
    }
}

#[test]
fn a_text_alone_equals_the_same_text_in_a_padded_batch() {
    let exp = expected("tiny-roberta");
    let checkpoint = Checkpoint::open(&fixture("tiny-roberta")).unwrap();
    let encoder = checkpoint.load_encoder(&LoadOptions::default(), &Device::Cpu).unwrap();
    let ids = exp["input_ids"].to_dtype(DType::U32).unwrap();
    let mask = exp["attention_mask"].to_dtype(DType::U32).unwrap();
    let batch = encoder.forward(&ids, &mask, Mode::Eval).unwrap();
    let lengths: Vec<u32> = mask.sum(1).unwrap().to_vec1().unwrap();
    for (row, &len) in lengths.iter().enumerate() {
        let len = len as usize;
        let alone_ids = ids.narrow(0, row, 1).unwrap().narrow(1, 0, len).unwrap();
        let alone = encoder.forward(&alone_ids, &alone_ids.ones_like().unwrap(), Mode::Eval).unwrap();
        let in_batch = batch.narrow(0, row, 1).unwrap().narrow(1, 0, len).unwrap();
        let diff = max_abs_diff(&alone, &in_batch);
        assert!(diff <= 1e-5, "row {row}: {diff}");
    }
}

/// Packed without padding (`forward_packed`, the CPU embedding path), each text's rows equal
/// transformers' rows of its real tokens in the padded batch, for BERT and RoBERTa positions.
#[test]
fn packed_sequences_match_transformers_real_tokens() {
    for name in FIXTURES {
        let exp = expected(name);
        let checkpoint = Checkpoint::open(&fixture(name)).unwrap();
        let encoder = checkpoint.load_encoder(&LoadOptions::default(), &Device::Cpu).unwrap();
        let ids = exp["input_ids"].to_dtype(DType::U32).unwrap().to_vec2::<u32>().unwrap();
        let lengths: Vec<u32> = exp["attention_mask"].to_dtype(DType::U32).unwrap().sum(1).unwrap().to_vec1().unwrap();
        assert!(lengths.iter().min() < lengths.iter().max(), "{name}: the fixture has padding");
        let seqs: Vec<&[u32]> = ids.iter().zip(&lengths).map(|(row, &n)| &row[..n as usize]).collect();
        let (hidden, segments) = encoder.forward_packed(&seqs).unwrap();
        assert_eq!(hidden.dims()[0], lengths.iter().sum::<u32>() as usize, "{name}: one row per real token");
        for (row, segment) in segments.iter().enumerate() {
            assert_eq!(segment.len(), lengths[row] as usize);
            let want = exp["last_hidden_state"].get(row).unwrap().narrow(0, 0, segment.len()).unwrap();
            let got = hidden.narrow(0, segment.start, segment.len()).unwrap();
            let diff = max_abs_diff(&got, &want);
            assert!(diff <= 1e-4, "{name} row {row}: max abs diff {diff}");
        }
    }
}

#[test]
fn packed_sequences_refuse_bad_input_by_name() {
    let checkpoint = Checkpoint::open(&fixture("tiny-bert")).unwrap();
    let encoder = checkpoint.load_encoder(&LoadOptions::default(), &Device::Cpu).unwrap();
    let too_long = vec![1u32; checkpoint.config.max_sequence_length() + 1];
    let cases: [(&[&[u32]], &str); 4] = [
        (&[], "empty"),
        (&[&[1, 2], &[]], "empty"),
        (&[&[1, 2], &too_long], "exceeds"),
        (&[&[1, 999_999]], "out of range"),
    ];
    for (seqs, words) in cases {
        let err = encoder.forward_packed(seqs).unwrap_err().to_string();
        assert!(err.contains(words), "{err}");
    }
}
