//! Request bodies: JSON parsed with errors that name the problem (422), TEI's `inputs` (one
//! text or a list), and the limits on texts and batches (413, 400).

use axum::body::Bytes;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ApiError;

/// One text or a list of texts, as TEI and OpenAI accept them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Inputs {
    /// `"text"`: answered with one result.
    One(String),
    /// `["t1", ...]`: answered with a list.
    Many(Vec<String>),
}

impl Inputs {
    /// Reads `value` (the `field` of a request): a string or a list of strings.
    pub(crate) fn from_value(value: Value, field: &str) -> Result<Self, ApiError> {
        match value {
            Value::String(s) => Ok(Self::One(s)),
            Value::Array(items) if token_ids(&items) => {
                Err(ApiError::invalid(format!("`{field}` is a list of token ids; {TEXT_ONLY}")))
            }
            Value::Array(items) => items
                .into_iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s),
                    Value::Array(ids) if token_ids(&ids) => {
                        Err(ApiError::invalid(format!("`{field}[{i}]` is a list of token ids; {TEXT_ONLY}")))
                    }
                    Value::Array(pair) if pair.len() == 2 && pair.iter().all(Value::is_string) => {
                        Err(ApiError::invalid(format!(
                            "`{field}[{i}]` is a pair of texts (TEI's input for cross-encoders); this server's \
                             models read one text at a time: join them, or send them as two inputs"
                        )))
                    }
                    other => Err(ApiError::invalid(format!("`{field}[{i}]` must be a string, not {}", kind(&other)))),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Self::Many),
            Value::Null => Err(ApiError::invalid(format!("`{field}` is missing"))),
            other => {
                Err(ApiError::invalid(format!("`{field}` must be a string or a list of strings, not {}", kind(&other))))
            }
        }
    }

    /// The texts, checked against the limits: a list must not be empty (400) nor longer than
    /// `max_batch` (413); no text may be empty (422) or longer than `max_chars` (413).
    pub(crate) fn texts(&self, field: &str, max_batch: usize, max_chars: usize) -> Result<Vec<&str>, ApiError> {
        let texts: Vec<&str> = match self {
            Self::One(s) => vec![s.as_str()],
            Self::Many(list) => list.iter().map(String::as_str).collect(),
        };
        if texts.is_empty() {
            return Err(ApiError::empty_batch());
        }
        if texts.len() > max_batch {
            return Err(ApiError::too_large(format!(
                "{} texts in one request; at most {max_batch} (--max-client-batch-size)",
                texts.len()
            )));
        }
        for (i, text) in texts.iter().enumerate() {
            let at = self.name(field, i);
            if text.trim().is_empty() {
                return Err(ApiError::invalid(format!("{at} is empty")));
            }
            let chars = text.chars().count();
            if chars > max_chars {
                return Err(ApiError::too_large(format!(
                    "{at} has {chars} characters; at most {max_chars} (--max-input-chars)"
                )));
            }
        }
        Ok(texts)
    }

    /// How an error names text `i`: `` `inputs` `` or `` `inputs[i]` ``.
    pub(crate) fn name(&self, field: &str, i: usize) -> String {
        match self {
            Self::One(_) => format!("`{field}`"),
            Self::Many(_) => format!("`{field}[{i}]`"),
        }
    }

    /// Wraps one result per text as the request asked: the one result, or the list.
    pub(crate) fn shape<T: serde::Serialize>(&self, mut results: Vec<T>) -> OneOrMany<T> {
        match self {
            Self::One(_) => OneOrMany::One(results.remove(0)),
            Self::Many(_) => OneOrMany::Many(results),
        }
    }
}

/// One result, or a list of them, as the request's `inputs` was.
#[derive(Debug, serde::Serialize)]
#[serde(untagged)]
pub(crate) enum OneOrMany<T> {
    /// For one text.
    One(T),
    /// For a list of texts.
    Many(Vec<T>),
}

/// Parses a JSON body into `T`, a 422 naming the problem otherwise (not JSON, not UTF-8,
/// wrong types).
pub(crate) fn parse_body<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    if body.is_empty() {
        return Err(ApiError::invalid("the request body is empty; send a JSON object"));
    }
    // serde reads a struct from a JSON list too (its fields in order): only objects are requests.
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(ApiError::invalid("the request body must be a JSON object, such as {\"inputs\": \"...\"}"));
    }
    serde_json::from_slice(body).map_err(|e| {
        let hint = if e.to_string().contains("hex escape") || e.to_string().contains("surrogate") {
            " (a \\uD800–\\uDFFF escape must be one half of a surrogate pair: a lone surrogate is not text)"
        } else {
            ""
        };
        ApiError::invalid(format!("the request body is not valid: {e}{hint}"))
    })
}

/// What a JSON value is, in words.
/// Why token ids are refused, and what sends them: OpenAI's API takes them, but they are ids of
/// OpenAI's tokenizer (tiktoken), which mean nothing to this model's.
const TEXT_ONLY: &str = "this server reads text only, through its model's own tokenizer (LangChain's \
OpenAIEmbeddings sends OpenAI's tiktoken ids unless created with check_embedding_ctx_length=False)";

/// Whether `items` is a non-empty list of integers (tokens), as OpenAI's API allows for `input`.
fn token_ids(items: &[Value]) -> bool {
    !items.is_empty() && items.iter().all(|v| v.is_u64() || v.is_i64())
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_a_text_or_a_list_of_texts() {
        assert_eq!(Inputs::from_value(Value::from("a"), "inputs").unwrap(), Inputs::One("a".into()));
        let many = Inputs::from_value(serde_json::json!(["a", "b"]), "inputs").unwrap();
        assert_eq!(many, Inputs::Many(vec!["a".into(), "b".into()]));
        let bad = Inputs::from_value(serde_json::json!(["a", 3]), "inputs").unwrap_err();
        assert!(bad.body.error.contains("`inputs[1]` must be a string, not a number"), "{}", bad.body.error);
        assert_eq!(bad.status.as_u16(), 422);
        assert_eq!(Inputs::from_value(Value::Null, "input").unwrap_err().body.error, "`input` is missing");
        // Regression: LangChain's OpenAIEmbeddings sends tiktoken ids by default, and the answer
        // said only "`input[0]` must be a string, not a list".
        let pair = Inputs::from_value(serde_json::json!([["a", "b"]]), "inputs").unwrap_err();
        assert!(pair.body.error.starts_with("`inputs[0]` is a pair of texts"), "{}", pair.body.error);
        for (value, at) in [(serde_json::json!([[1, 2, 3]]), "`input[0]`"), (serde_json::json!([1, 2, 3]), "`input`")] {
            let bad = Inputs::from_value(value, "input").unwrap_err();
            assert!(bad.body.error.starts_with(&format!("{at} is a list of token ids; ")), "{}", bad.body.error);
            assert!(bad.body.error.contains("check_embedding_ctx_length=False"), "{}", bad.body.error);
            assert_eq!(bad.status.as_u16(), 422);
        }
    }

    #[test]
    fn limits_give_tei_codes() {
        let code = |inputs: Inputs| inputs.texts("inputs", 2, 5).unwrap_err().status.as_u16();
        assert_eq!(code(Inputs::Many(vec![])), 400);
        assert_eq!(code(Inputs::Many(vec!["a".into(); 3])), 413);
        assert_eq!(code(Inputs::One("abcdef".into())), 413);
        assert_eq!(code(Inputs::Many(vec!["a".into(), " ".into()])), 422);
        assert_eq!(Inputs::One("héllo".into()).texts("inputs", 2, 5).unwrap(), vec!["héllo"]);
    }
}
