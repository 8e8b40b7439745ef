//! Word vectors for a HAN taken from a pretrained encoder: each vocabulary word is tokenized
//! with the encoder's tokenizer and gets the mean of its pieces' input embeddings.

use std::path::Path;

use candle_core::{DType, Tensor};
use longread_text::words::{Vocabulary, PAD};
use longread_text::TextTokenizer;

use crate::checkpoint::Checkpoint;
use crate::error::{ModelError, Result};

/// Word vectors from an encoder directory and how many words they cover.
#[derive(Debug, Clone)]
pub struct EncoderWordVectors {
    /// `[vocabulary.len(), hidden]`: `<pad>` zero, `<unk>` the encoder's unknown token (or the
    /// mean of all its embeddings when it has none), every other word the mean of its pieces.
    pub vectors: Tensor,
    /// Words that are a single piece of the encoder's vocabulary.
    pub single_piece: usize,
}

/// Reads `embeddings.word_embeddings.weight` and the tokenizer of the encoder in `dir`.
///
/// # Shapes
/// → `vectors: [vocabulary.len(), hidden_size]`
pub fn encoder_word_vectors(dir: &Path, vocabulary: &Vocabulary) -> Result<EncoderWordVectors> {
    let checkpoint = Checkpoint::open(dir)?;
    let prefix = checkpoint.encoder_prefix();
    let name = if prefix.is_empty() {
        "embeddings.word_embeddings.weight".to_string()
    } else {
        format!("{prefix}.embeddings.word_embeddings.weight")
    };
    let table = checkpoint.store.load(&name, &crate::device::host())?.to_dtype(DType::F32)?;
    let (rows, hidden) = table.dims2()?;
    let tokenizer = TextTokenizer::from_file(checkpoint.files.require_tokenizer()?)?;
    let tokenizer = tokenizer.inner();
    let table = table.to_vec2::<f32>()?;
    let mean_of = |ids: &[u32]| -> Vec<f32> {
        let mut v = vec![0f32; hidden];
        for &id in ids {
            for (x, y) in v.iter_mut().zip(&table[id as usize]) {
                *x += y / ids.len() as f32;
            }
        }
        v
    };
    let unk = match ["[UNK]", "<unk>"].iter().find_map(|t| tokenizer.token_to_id(t)) {
        Some(id) if (id as usize) < rows => table[id as usize].clone(),
        _ => mean_of(&(0..rows as u32).collect::<Vec<_>>()),
    };
    let mut single_piece = 0;
    let mut data = Vec::with_capacity(vocabulary.len() * hidden);
    for (id, word) in vocabulary.words().iter().enumerate() {
        let vector = if id as u32 == PAD {
            vec![0f32; hidden]
        } else if id as u32 == longread_text::words::UNK {
            unk.clone()
        } else {
            let encoding = tokenizer.encode(word.as_str(), false).map_err(|e| ModelError::InvalidConfig {
                path: dir.to_owned(),
                message: format!("tokenizing \"{word}\": {e}"),
            })?;
            let ids: Vec<u32> = encoding.get_ids().iter().copied().filter(|&i| (i as usize) < rows).collect();
            single_piece += usize::from(ids.len() == 1);
            if ids.is_empty() {
                unk.clone()
            } else {
                mean_of(&ids)
            }
        };
        data.extend(vector);
    }
    let vectors = Tensor::from_vec(data, (vocabulary.len(), hidden), &crate::device::host())?;
    Ok(EncoderWordVectors { vectors, single_piece })
}
