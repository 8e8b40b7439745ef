//! Every route and error code of a real server on 127.0.0.1, with a real HTTP client.

mod common;

use common::{documents, fixture, max_diff, minilm, numbers, TestServer};
use longread_classifier::{Classifier, ClassifierOptions};
use longread_model::sentence_pooling::SentencePooling;
use longread_model::{Embedder, EmbedderOptions};
use longread_server::ServerConfig;
use serde_json::json;

fn hierarchical() -> ServerConfig {
    ServerConfig { max_batch_tokens: Some(128), ..ServerConfig::new(fixture("hier/trained-bert-attention")) }
}

#[test]
fn classify_answers_what_the_library_answers_for_every_model_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let ensemble = tmp.path().join("ensemble");
    let members = [(fixture("hier/trained-bert-attention"), 1.0), (fixture("han"), 1.0)];
    longread_classifier::ensemble::build_ensemble(&members, &ensemble).unwrap();
    let mut kinds: Vec<(&str, std::path::PathBuf)> =
        ["hier/trained-bert-attention", "hier/trained-multitask", "han"].map(|m| (m, fixture(m))).into();
    kinds.push(("ensemble", ensemble));
    for (model, dir) in kinds {
        let server = TestServer::start(ServerConfig::new(dir.clone()));
        let classifier = Classifier::load(&dir, ClassifierOptions::default()).unwrap();
        let docs = documents();
        let (status, body) = server.post_json("/classify", &json!({ "inputs": docs }));
        assert_eq!(status, 200, "{model}: {body}");
        let served = body.as_array().unwrap();
        assert_eq!(served.len(), docs.len());
        for (text, served) in docs.iter().zip(served) {
            let alone = classifier.classify(&[text]).unwrap().remove(0).unwrap();
            let expected = serde_json::to_value(&alone).unwrap();
            assert_eq!(served["label"], expected["label"], "{model}");
            assert!(max_diff(&numbers(&served["logits"]), &numbers(&expected["logits"])) <= 1e-6);
            let evidence = if model == "han" { "sentences" } else { "chunks" };
            let attention = |v: &serde_json::Value| -> Vec<f64> {
                v[evidence].as_array().unwrap().iter().map(|c| c["attention"].as_f64().unwrap()).collect()
            };
            assert!(max_diff(&attention(served), &attention(&expected)) <= 1e-6, "{model}");
            assert_eq!(served.get("tasks").is_some(), model.contains("multitask"));
            assert_eq!(served.get("members").is_some(), model == "ensemble");
        }
        // One text gives one object; chunks: false leaves the evidence out.
        let (status, one) = server.post_json("/classify", &json!({ "inputs": docs[0], "chunks": false }));
        assert_eq!(status, 200);
        assert!(one.is_object() && one.get("chunks").is_none() && one.get("sentences").is_none(), "{one}");
    }
}

/// `serve --occlusion`: /classify's chunks carry the occlusion the library gives.
#[test]
fn classify_carries_occlusion_when_the_server_is_started_with_it() {
    let server = TestServer::start(ServerConfig { occlusion: true, ..hierarchical() });
    let options = ClassifierOptions { occlusion: true, ..ClassifierOptions::default() };
    let classifier = Classifier::load(&fixture("hier/trained-bert-attention"), options).unwrap();
    let text = documents().into_iter().max_by_key(String::len).unwrap();
    let (status, served) = server.post_json("/classify", &json!({ "inputs": text }));
    assert_eq!(status, 200, "{served}");
    let expected = serde_json::to_value(classifier.classify(&[&text]).unwrap().remove(0).unwrap()).unwrap();
    let occlusion = |v: &serde_json::Value| -> Vec<f64> {
        v["chunks"].as_array().unwrap().iter().map(|c| c["occlusion"].as_f64().unwrap()).collect()
    };
    assert!(occlusion(&expected).len() > 1);
    assert!(max_diff(&occlusion(&served), &occlusion(&expected)) <= 1e-6, "{served}");
    let (_, info) = server.get("/info");
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["limits"]["occlusion"], true, "{info}");
    let plain = TestServer::start(hierarchical());
    let (_, served) = plain.post_json("/classify", &json!({ "inputs": text }));
    assert!(served["chunks"][0].get("occlusion").is_none(), "off by default: {served}");
}

#[test]
fn predict_answers_as_tei_sorted_by_score() {
    let server = TestServer::start(hierarchical());
    let (status, one) = server.post_json("/predict", &json!({ "inputs": "The committee met on Tuesday." }));
    assert_eq!(status, 200);
    let scores: Vec<f64> = one.as_array().unwrap().iter().map(|s| s["score"].as_f64().unwrap()).collect();
    assert_eq!(scores.len(), 3);
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{one}");
    assert!((scores.iter().sum::<f64>() - 1.0).abs() < 1e-5);
    let (_, classified) = server.post_json("/classify", &json!({ "inputs": "The committee met on Tuesday." }));
    assert_eq!(one[0]["label"], classified["label"]);
    let (_, raw) =
        server.post_json("/predict", &json!({ "inputs": ["a b c", "The committee met."], "raw_scores": true }));
    let raw = raw.as_array().unwrap();
    assert_eq!(raw.len(), 2);
    assert!(raw[0].as_array().unwrap().iter().map(|s| s["score"].as_f64().unwrap()).sum::<f64>().abs() > 1e-9);
    // TEI's aliases: POST / and /invocations (SageMaker) predict; GET /ping is /health. (A
    // client pointed at the server's root URL, as huggingface_hub's InferenceClient is, got 405.)
    for alias in ["/", "/invocations"] {
        let (status, same) = server.post_json(alias, &json!({ "inputs": "The committee met on Tuesday." }));
        assert_eq!((status, &same), (200, &one), "{alias}");
    }
    assert_eq!(server.get("/ping").0, 200);
    assert!(server.get("/").1.contains("<html"), "GET / is still the page");

    // The Inference API's `parameters`, which huggingface_hub's InferenceClient sends with
    // nulls (422 "unknown field `parameters`" before; TEI ignores them).
    let text = "The committee met on Tuesday.";
    let with =
        |parameters: serde_json::Value| server.post_json("/", &json!({ "inputs": text, "parameters": parameters }));
    assert_eq!(with(json!({ "top_k": null, "function_to_apply": null })), (200, one.clone()));
    let (status, top) = with(json!({ "top_k": 1 }));
    assert_eq!((status, top.as_array().unwrap().len(), &top[0]), (200, 1, &one[0]));
    let (_, logits) = server.post_json("/predict", &json!({ "inputs": text, "raw_scores": true }));
    assert_eq!(with(json!({ "function_to_apply": "none" })), (200, logits.clone()));
    let (_, sigmoid) = with(json!({ "function_to_apply": "sigmoid" }));
    for (s, z) in sigmoid.as_array().unwrap().iter().zip(logits.as_array().unwrap()) {
        assert_eq!(s["label"], z["label"], "the same order: sigmoid is monotone");
        let want = 1.0 / (1.0 + (-z["score"].as_f64().unwrap()).exp());
        assert!((s["score"].as_f64().unwrap() - want).abs() < 1e-6, "{s} vs {z}");
    }
    for (body, needle) in [
        (json!({ "inputs": text, "parameters": { "function_to_apply": "tanh" } }), "expected \"softmax\""),
        (json!({ "inputs": text, "parameters": { "top_k": 0 } }), "at least 1"),
        (json!({ "inputs": text, "parameters": { "topk": 1 } }), "unknown field `topk`"),
        (
            json!({ "inputs": text, "raw_scores": true, "parameters": { "function_to_apply": "softmax" } }),
            "gives logits",
        ),
    ] {
        let (status, error) = server.post_json("/predict", &body);
        assert_eq!(status, 422, "{body}: {error}");
        assert!(error["error"].as_str().unwrap().contains(needle), "{error}");
    }
}

#[test]
fn bad_requests_get_tei_codes_and_the_server_goes_on() {
    let config =
        ServerConfig { max_client_batch_size: 3, max_input_chars: 500, max_body_bytes: 4096, ..hierarchical() };
    let server = TestServer::start(config);
    let error = |path: &str, body: &str| -> (u16, String, String) {
        let (status, text) = server.post(path, body);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{status}: {text}"));
        (status, v["error"].as_str().unwrap().to_owned(), v["error_type"].as_str().unwrap().to_owned())
    };
    let cases: [(&str, &str, u16, &str, &str); 10] = [
        ("/classify", "not json", 422, "validation", "not valid"),
        ("/classify", "", 422, "validation", "empty"),
        ("/classify", r#"{"inputs": 3}"#, 422, "validation", "must be a string or a list of strings, not a number"),
        ("/classify", r#"{"inputs": ["a", null]}"#, 422, "validation", "`inputs[1]` must be a string"),
        ("/classify", r#"{"text": "a"}"#, 422, "validation", "unknown field"),
        ("/classify", r#"{"inputs": []}"#, 400, "validation", "empty list"),
        ("/classify", r#"{"inputs": ["ok", "  "]}"#, 422, "validation", "`inputs[1]` is empty"),
        ("/classify", r#"{"inputs": ["a", "b", "c", "d"]}"#, 413, "validation", "at most 3"),
        ("/predict", &format!(r#"{{"inputs": "{}"}}"#, "word ".repeat(120)), 413, "validation", "at most 500"),
        ("/embed", r#"{"inputs": "a"}"#, 404, "not_found", "--embedding-model"),
    ];
    for (path, body, code, kind, needle) in cases {
        let (status, message, error_type) = error(path, body);
        assert_eq!((status, error_type.as_str()), (code, kind), "{path} {body}: {message}");
        assert!(message.contains(needle), "{path} {body}: {message}");
    }
    let (status, message, _) = error("/classify", &format!(r#"{{"inputs": "{}"}}"#, "x".repeat(5000)));
    assert_eq!(status, 413, "{message}");
    assert!(message.contains("--max-body-bytes"), "{message}");
    let (status, _) = server.get("/no-such-route");
    assert_eq!(status, 404);
    let (status, ok) = server.post_json("/classify", &json!({ "inputs": "Still serving." }));
    assert_eq!(status, 200, "{ok}");
}

/// Each error has the error shape and a request is an object: otherwise a 405 had an empty
/// body, a top-level JSON list was read as a request, /predict took unknown fields that
/// /classify refuses, and a lone surrogate escape got serde's bare "unexpected end of hex
/// escape".
#[test]
fn every_error_has_the_error_shape_and_requests_are_objects() {
    let server = TestServer::start(hierarchical());
    let error = |path: &str, body: &str| -> (u16, String, String) {
        let (status, text) = server.post(path, body);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{status}: {text}"));
        (status, v["error"].as_str().unwrap().to_owned(), v["error_type"].as_str().unwrap().to_owned())
    };
    for (path, body, needle) in [
        ("/classify", r#"["The committee met.", true]"#, "must be a JSON object"),
        ("/predict", r#"  ["The committee met."]"#, "must be a JSON object"),
        ("/predict", r#"{"inputs": "a", "raw_score": true}"#, "unknown field `raw_score`"),
        ("/classify", r#"{"inputs": "\ud800"}"#, "lone surrogate"),
    ] {
        let (status, message, kind) = error(path, body);
        assert_eq!((status, kind.as_str()), (422, "validation"), "{path} {body}: {message}");
        assert!(message.contains(needle), "{path} {body}: {message}");
    }
    // TEI's own fields are still taken.
    let (status, _) =
        server.post("/predict", r#"{"inputs": "a b", "truncate": true, "truncation_direction": "Right"}"#);
    assert_eq!(status, 200);
    let (status, text) = server.get("/classify");
    assert_eq!(status, 405, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(v["error"].as_str().unwrap().contains("/classify does not take GET"), "{text}");
    assert_eq!(v["error_type"], "method_not_allowed", "{text}");
    // OpenAI's model list without an embedding model: empty, and any id is not found.
    let (status, models) = server.get("/v1/models");
    assert_eq!(status, 200, "{models}");
    let models: serde_json::Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models, json!({ "object": "list", "data": [] }));
    let (status, text) = server.get("/v1/models/gpt-4");
    assert_eq!(status, 404, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("no embedding model"), "{text}");
}

/// axum's own 2 MiB body limit must not apply whatever --max-body-bytes says (a 2.8 MB
/// Cyrillic document inside the character limit got 413).
#[test]
fn the_body_limit_is_max_body_bytes_above_two_mebibytes() {
    let config = ServerConfig { max_input_chars: 1_000, max_body_bytes: 4 * 1024 * 1024, ..hierarchical() };
    let server = TestServer::start(config);
    // 3 MB of Cyrillic (2 bytes a character): read whole, then refused by the character limit.
    let body = format!(r#"{{"inputs": "{}"}}"#, "ж".repeat(1_500_000));
    assert!(body.len() > 3_000_000);
    let (status, text) = server.post("/classify", &body);
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("at most 1000") && !text.contains("--max-body-bytes"), "{text}");
}

#[test]
fn health_info_metrics_openapi_and_the_page() {
    let server = TestServer::start(hierarchical());
    assert_eq!(server.get("/health").0, 200);
    let (status, info) = server.get("/info");
    assert_eq!(status, 200);
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["labels"], json!(["general", "teen", "mature"]));
    assert_eq!(info["evidence_unit"], "chunk");
    assert_eq!(info["limits"]["max_batch_tokens"], 128);
    // The device the encoder runs on, and the precision chosen for it (the CPU's f32 here).
    let on_gpu = longread_model::device::cuda_device_count() > 0;
    assert_eq!(info["device"].as_str().unwrap().starts_with("cuda:"), on_gpu, "{info}");
    assert_eq!(info["limits"]["precision"], if on_gpu { "bf16" } else { "f32" });
    assert!(info["model"]["longread"].is_object() || info["model"].is_object(), "{info}");

    server.post_json("/classify", &json!({ "inputs": documents() }));
    server.post("/classify", "{}");
    let (status, metrics) = server.get("/metrics");
    assert_eq!(status, 200);
    for line in [
        "longread_requests_total{route=\"/classify\",status=\"200\"} 1",
        "longread_requests_total{route=\"/classify\",status=\"422\"} 1",
        &format!("longread_documents_total {}", documents().len()),
        "longread_queue_duration_seconds_count",
        "longread_inference_duration_seconds_count",
        "longread_tokenize_duration_seconds_count 1",
        "longread_batch_units_count",
        "longread_queue_documents 0",
        "longread_queue_units 0",
    ] {
        assert!(metrics.contains(line), "no {line} in\n{metrics}");
    }
    let chunks = metrics.lines().find(|l| l.starts_with("longread_chunks_total ")).unwrap();
    assert!(chunks.split(' ').nth(1).unwrap().parse::<u64>().unwrap() >= documents().len() as u64);

    let (status, openapi) = server.get("/openapi.json");
    assert_eq!(status, 200);
    let openapi: serde_json::Value = serde_json::from_str(&openapi).unwrap();
    for path in [
        "/classify",
        "/predict",
        "/embed",
        "/v1/embeddings",
        "/v1/models",
        "/v1/models/{model}",
        "/health",
        "/info",
        "/metrics",
        "/",
        "/report",
    ] {
        assert!(openapi["paths"][path].is_object(), "{path} missing from openapi.json");
    }
    assert!(openapi["components"]["schemas"]["Prediction"].is_object());

    let (status, page) = server.get("/");
    assert_eq!(status, 200);
    assert!(page.contains("<textarea") && page.contains("fetch('report'"));
    assert!(!page.contains("http://") && !page.contains("https://"), "the page loads nothing from elsewhere");
    let (status, report) = server.post("/report", &json!({ "inputs": documents()[2] }).to_string());
    assert_eq!(status, 200);
    let (_, classified) = server.post_json("/classify", &json!({ "inputs": documents()[2] }));
    assert!(report.contains(classified["label"].as_str().unwrap()), "the report names the label");
}

#[test]
fn embeddings_as_tei_and_openai_answer_them() {
    let Some(minilm) = minilm() else { return };
    let config = ServerConfig { embedding_model: Some(minilm.clone()), ..hierarchical() };
    let server = TestServer::start(config);
    let texts = ["What is deep learning?", "The committee met on Tuesday."];
    let embedder =
        Embedder::open(&minilm, EmbedderOptions { normalize: Some(true), ..EmbedderOptions::default() }).unwrap();
    let expected = embedder.embed(&texts, 8, |_| {}).unwrap();

    let (status, tei) = server.post_json("/embed", &json!({ "inputs": texts }));
    assert_eq!(status, 200, "{tei}");
    let tei = tei.as_array().unwrap();
    assert_eq!(tei.len(), 2);
    for (served, want) in tei.iter().zip(&expected.vectors) {
        let want: Vec<f64> = want.iter().map(|&x| x as f64).collect();
        assert!(max_diff(&numbers(served), &want) <= 1e-5);
    }
    let (_, raw) = server.post_json("/embed", &json!({ "inputs": texts[0], "normalize": false }));
    let norm = numbers(&raw[0]).iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((norm - 1.0).abs() > 1e-3, "normalize: false keeps the length ({norm})");
    // The Inference API's parameters (huggingface_hub's InferenceClient): normalize honoured
    // (it was ignored, so normalize=False gave unit vectors), nulls accepted.
    let nulls = json!({ "normalize": null, "prompt_name": null, "truncate": null, "truncation_direction": null });
    let (status, same) = server.post_json("/embed", &json!({ "inputs": texts, "parameters": nulls }));
    assert_eq!((status, same.as_array().unwrap()), (200, tei));
    let (_, unscaled) =
        server.post_json("/embed", &json!({ "inputs": texts[0], "parameters": { "normalize": false } }));
    assert_eq!(unscaled, raw);
    for (body, needle) in [
        (json!({ "inputs": "x", "normalize": true, "parameters": { "normalize": false } }), "disagree"),
        (json!({ "inputs": "x", "prompt_name": "query" }), "no prompts"),
        (json!({ "inputs": "x", "parameters": { "prompt_name": "query" } }), "no prompts"),
    ] {
        let (status, error) = server.post_json("/embed", &body);
        assert_eq!(status, 422, "{body}: {error}");
        assert!(error["error"].as_str().unwrap().contains(needle), "{error}");
    }

    let (_, info) = server.get("/info");
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(
        info["embedding"],
        json!({ "pooling": "mean", "normalize_module": true, "dimension": 384, "max_tokens": 256 }),
        "{info}"
    );
    // OpenAI's model list names the embedding model by its directory (clients' models.list()).
    let id = minilm.file_name().unwrap().to_str().unwrap();
    let (status, models) = server.get("/v1/models");
    assert_eq!(status, 200, "{models}");
    let models: serde_json::Value = serde_json::from_str(&models).unwrap();
    assert_eq!((models["object"].as_str(), models["data"].as_array().map(Vec::len)), (Some("list"), Some(1)));
    assert_eq!((&models["data"][0]["id"], &models["data"][0]["object"]), (&json!(id), &json!("model")));
    assert!(models["data"][0]["created"].as_u64().unwrap() > 1_700_000_000, "{models}");
    let (status, one) = server.get(&format!("/v1/models/{id}"));
    assert_eq!((status, serde_json::from_str::<serde_json::Value>(&one).unwrap()), (200, models["data"][0].clone()));
    let (status, other) = server.get("/v1/models/text-embedding-3-small");
    assert_eq!(status, 404, "{other}");
    let other: serde_json::Value = serde_json::from_str(&other).unwrap();
    let message = other["error"]["message"].as_str().unwrap();
    assert!(message.contains("`text-embedding-3-small` does not exist") && message.contains(id), "{other}");

    let (status, openai) = server.post_json("/v1/embeddings", &json!({ "input": texts, "model": "minilm" }));
    assert_eq!(status, 200, "{openai}");
    assert_eq!(openai["object"], "list");
    assert_eq!(openai["model"], "minilm");
    assert_eq!(openai["data"][1]["index"], 1);
    assert_eq!(openai["data"][1]["object"], "embedding");
    assert_eq!(numbers(&openai["data"][0]["embedding"]), numbers(&tei[0]));
    let tokens: usize = expected.token_counts.iter().sum();
    assert_eq!(openai["usage"]["prompt_tokens"], tokens);
    assert_eq!(openai["usage"]["total_tokens"], tokens);

    // OpenAI's own clients ask for base64 unless told otherwise (it was refused: "must be
    // float"): the vector's little-endian f32 bytes.
    use base64::Engine;
    let (status, b64) = server.post_json("/v1/embeddings", &json!({ "input": texts, "encoding_format": "base64" }));
    assert_eq!(status, 200, "{b64}");
    for (i, served) in tei.iter().enumerate() {
        let bytes =
            base64::engine::general_purpose::STANDARD.decode(b64["data"][i]["embedding"].as_str().unwrap()).unwrap();
        let floats: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        let want: Vec<f32> = numbers(served).iter().map(|&x| x as f32).collect();
        assert_eq!(floats, want, "text {i}: the same vector, bit for bit");
    }
    // `dimensions` (it was ignored): the first N, scaled back to unit length.
    // OpenAI's route without /v1 (TEI serves it too), errors in OpenAI's shape there as well.
    let (status, plain) = server.post_json("/embeddings", &json!({ "input": texts }));
    assert_eq!(status, 200, "{plain}");
    assert_eq!(plain["data"], openai["data"]);
    let (status, error) = server.post_json("/embeddings", &json!({ "input": "" }));
    assert_eq!(status, 422, "{error}");
    assert!(error["error"]["message"].is_string(), "{error}");
    // TEI's routes keep TEI's error shape.
    let (status, error) = server.post_json("/embed", &json!({ "inputs": "" }));
    assert_eq!(status, 422, "{error}");
    assert!(error["error"].is_string() && error["error_type"] == "validation", "{error}");
    let (status, short) = server.post_json("/v1/embeddings", &json!({ "input": texts[0], "dimensions": 8 }));
    assert_eq!(status, 200, "{short}");
    let short = numbers(&short["data"][0]["embedding"]);
    let head = &numbers(&raw[0])[..8];
    let norm = head.iter().map(|x| x * x).sum::<f64>().sqrt();
    let want: Vec<f64> = head.iter().map(|x| x / norm).collect();
    assert_eq!(short.len(), 8);
    assert!(max_diff(&short, &want) <= 1e-5, "{short:?} vs {want:?}");
    // TEI's /embed takes `dimensions` too, in the body (InferenceClient's feature_extraction
    // puts its keys there) or in `parameters`; it was ignored and 384 values came back.
    let root =
        json!({ "inputs": texts[0], "dimensions": 8, "truncation_direction": "Right", "encoding_format": "float" });
    for body in [root, json!({ "inputs": texts[0], "parameters": { "dimensions": 8 } })] {
        let (status, tei_short) = server.post_json("/embed", &body);
        assert_eq!(status, 200, "{body}: {tei_short}");
        assert!(max_diff(&numbers(&tei_short[0]), &want) <= 1e-5, "{body}: {tei_short}");
    }
    // Regression: an option /embed does not know (misspelt, or one it cannot honour) was
    // ignored, and the answer was computed without it.
    for (body, needle) in [
        (json!({ "inputs": "x", "normalise": false }), "unknown field `normalise`"),
        (json!({ "inputs": "x", "parameters": { "dimension": 8 } }), "unknown field `dimension`"),
        (json!({ "inputs": "x", "truncation_direction": "left" }), "\"left\" is not supported"),
        (json!({ "inputs": "x", "encoding_format": "base64" }), "/embed answers floats"),
        (json!({ "inputs": "x", "dimensions": 0 }), "at least 1"),
        (json!({ "inputs": "x", "dimensions": 385 }), "`dimensions` 385 is more than the model's 384"),
        (json!({ "inputs": "x", "dimensions": 8, "parameters": { "dimensions": 9 } }), "disagree"),
    ] {
        let (status, error) = server.post_json("/embed", &body);
        assert_eq!(status, 422, "{body}: {error}");
        assert!(error["error"].as_str().unwrap().contains(needle), "{body}: {error}");
    }
    // `truncate: false` refuses a text over the model's 256 tokens (413, as TEI answers it; it
    // was accepted and ignored, so the vector silently covered the first 256 tokens only);
    // absent or true, the text is cut, and its vector is the first 256 tokens' vector.
    let long = "word ".repeat(400);
    let (status, cut) = server.post_json("/embed", &json!({ "inputs": long }));
    assert_eq!(status, 200, "{cut}");
    let (status, explicit) = server.post_json("/embed", &json!({ "inputs": long, "truncate": true }));
    assert_eq!((status, &explicit), (200, &cut));
    let first = embedder.tokenize(&[long.as_str()]).unwrap().remove(0);
    assert!(first.truncated && first.ids.len() == 256, "{} tokens", first.ids.len());
    let want: Vec<f64> =
        embedder.embed(&[long.as_str()], 8, |_| {}).unwrap().vectors[0].iter().map(|&x| x as f64).collect();
    assert!(max_diff(&numbers(&cut[0]), &want) <= 1e-5);
    for (body, place) in [
        (json!({ "inputs": long, "truncate": false }), "`inputs` is longer"),
        (json!({ "inputs": ["short", long], "truncate": false }), "`inputs[1]` is longer"),
        (json!({ "inputs": long, "parameters": { "truncate": false } }), "`inputs` is longer"),
    ] {
        let (status, error) = server.post_json("/embed", &body);
        assert_eq!(status, 413, "{error}");
        let message = error["error"].as_str().unwrap();
        assert!(message.contains(place) && message.contains("256 tokens"), "{message}");
    }
    let (status, fits) = server.post_json("/embed", &json!({ "inputs": texts, "truncate": false }));
    assert_eq!((status, fits.as_array().unwrap()), (200, tei));
    let (status, error) =
        server.post_json("/embed", &json!({ "inputs": "x", "truncate": true, "parameters": { "truncate": false } }));
    assert_eq!(status, 422, "{error}");
    for (body, needle) in [
        (json!({ "input": "x", "encoding_format": "binary" }), "\"float\" or \"base64\""),
        (json!({ "input": "x", "dimensions": 0 }), "at least 1"),
        (json!({ "input": "x", "dimensions": 385 }), "`dimensions` 385 is more than the model's 384"),
    ] {
        let (status, error) = server.post_json("/v1/embeddings", &body);
        assert_eq!(status, 422, "{body}: {error}");
        // OpenAI's error shape there (its clients read error.message).
        assert!(error["error"]["message"].as_str().unwrap().contains(needle), "{error}");
        assert_eq!(error["error"]["type"], "validation", "{error}");
    }
    drop(server);

    // --embedding-pooling overrides the model's own (all-MiniLM-L6-v2 pools the mean).
    let config = ServerConfig {
        embedding_model: Some(minilm.clone()),
        embedding_pooling: Some(SentencePooling::Cls),
        ..hierarchical()
    };
    let server = TestServer::start(config);
    let cls = Embedder::open(
        &minilm,
        EmbedderOptions { pooling: Some(SentencePooling::Cls), normalize: Some(true), ..EmbedderOptions::default() },
    )
    .unwrap();
    let want = cls.embed(&texts, 8, |_| {}).unwrap();
    let (status, served) = server.post_json("/embed", &json!({ "inputs": texts }));
    assert_eq!(status, 200, "{served}");
    for ((served, want), mean) in served.as_array().unwrap().iter().zip(&want.vectors).zip(tei) {
        let want: Vec<f64> = want.iter().map(|&x| x as f64).collect();
        assert!(max_diff(&numbers(served), &want) <= 1e-5);
        assert!(max_diff(&numbers(served), &numbers(mean)) > 1e-3, "not the mean's vectors");
    }
}

#[test]
fn a_missing_model_stops_the_server_with_the_reason() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let result = runtime.block_on(async {
        let config = ServerConfig { port: 0, ..ServerConfig::new("/no/such/model") };
        let server = longread_server::Server::bind(config).await.unwrap();
        server.serve(std::future::pending(), |_| panic!("a missing model is never ready")).await
    });
    let message = result.unwrap_err().to_string();
    assert!(message.contains("/no/such/model"), "{message}");
}

#[test]
fn every_route_answers_503_until_the_model_is_loaded() {
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async move {
            let config = ServerConfig { port: 0, ..hierarchical() };
            let server = longread_server::Server::bind(config).await.unwrap();
            addr_tx.send(server.local_addr().unwrap()).unwrap();
            let gate = async move {
                let _ = release_rx.await;
            };
            let stop = async move {
                let _ = stop_rx.await;
            };
            server.serve_after(gate, stop, move |a| ready_tx.send(a).unwrap()).await
        })
    });
    let url = format!("http://{}", addr_rx.recv().unwrap());
    let status = |r: Result<ureq::Response, ureq::Error>| match r {
        Ok(r) => (r.status(), r.into_string().unwrap()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap()),
        Err(e) => panic!("{e}"),
    };
    let (code, body) = status(ureq::get(&format!("{url}/health")).call());
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("\"error_type\":\"unhealthy\"") && body.contains("loading"), "{body}");
    let request = ureq::post(&format!("{url}/classify")).set("Content-Type", "application/json");
    let (code, body) = status(request.send_string(r#"{"inputs": "text"}"#));
    assert_eq!(code, 503, "{body}");
    assert_eq!(status(ureq::get(&format!("{url}/info")).call()).0, 503);
    release_tx.send(()).unwrap();
    ready_rx.recv_timeout(std::time::Duration::from_secs(60)).unwrap();
    assert_eq!(status(ureq::get(&format!("{url}/health")).call()).0, 200);
    stop_tx.send(()).unwrap();
    thread.join().unwrap().unwrap();
}
