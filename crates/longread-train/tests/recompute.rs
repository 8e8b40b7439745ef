//! Chunk-level recomputation gives the gradients of back-propagating the whole graph.

use std::path::PathBuf;

use candle_core::{Device, Tensor, Var};
use longread_model::hierarchical::{DocumentStore, HierarchicalClassifier};
use longread_model::DropoutRng;
use longread_text::{ChunkedDocument, Chunker, TextTokenizer};
use longread_train::loss::{MultiLabelGold, TaskLoss};
use longread_train::prefix::{open_store, Prefix, PrefixCache, Storage};
use longread_train::recompute::{batch_gradients, BatchSettings, StepPlan};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

fn documents(model: &HierarchicalClassifier) -> Vec<ChunkedDocument> {
    let chunker =
        Chunker::new(TextTokenizer::from_file(model.tokenizer_path()).unwrap(), model.config().longread.chunking())
            .unwrap();
    std::fs::read_to_string(fixture("hier/documents.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            chunker.chunk(v["text"].as_str().unwrap()).unwrap()
        })
        .collect()
}

/// Whether a document fits one batch of `max_batch_tokens` (padded).
fn fits(doc: &ChunkedDocument, max_batch_tokens: usize) -> bool {
    doc.chunks.len() * doc.chunks.iter().map(|c| c.ids.len()).max().unwrap_or(0) <= max_batch_tokens
}

/// A copy of fixture `name` (in `dir`) with every dropout probability of its config set to 0.
fn without_dropout(name: &str, dir: &std::path::Path) -> PathBuf {
    fn zero(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, v) in map.iter_mut() {
                    if k.contains("dropout") && v.is_number() {
                        *v = serde_json::json!(0.0);
                    } else {
                        zero(v);
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(zero),
            _ => {}
        }
    }
    let out = dir.join(name.replace('/', "-"));
    std::fs::create_dir_all(&out).unwrap();
    for entry in std::fs::read_dir(fixture(name)).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, out.join(path.file_name().unwrap())).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    zero(&mut config);
    std::fs::write(out.join("config.json"), config.to_string()).unwrap();
    out
}

/// The largest absolute difference between two runs' gradients of `vars`.
fn largest_gradient_difference(
    a: &longread_train::recompute::BatchGradients,
    b: &longread_train::recompute::BatchGradients,
    vars: &[Var],
) -> f32 {
    vars.iter()
        .map(|v| {
            let (x, y) = (&a.grads[&v.as_tensor().id()], &b.grads[&v.as_tensor().id()]);
            x.sub(y).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
        })
        .fold(0.0, f32::max)
}

#[test]
fn the_step_plan_keeps_the_graph_of_documents_that_fit_one_batch() {
    let model = HierarchicalClassifier::load(&fixture("hier/bert-attention"), true, &Device::Cpu).unwrap();
    let docs = documents(&model);
    let refs: Vec<&ChunkedDocument> = docs.iter().collect();
    let costs: Vec<(usize, usize)> =
        docs.iter().map(|d| (d.chunks.len(), d.chunks.iter().map(|c| c.ids.len()).max().unwrap())).collect();
    // Two short documents fit a 40-token batch each, not together; the two long ones do not.
    assert!(fits(&docs[0], 40) && fits(&docs[1], 40), "{costs:?}");
    assert!(!fits(&docs[2], 40) && !fits(&docs[3], 40), "{costs:?}");
    assert_eq!(StepPlan::new(&refs, 40, true), StepPlan { kept: vec![vec![0], vec![1]], chunked: vec![2, 3] });
    // Without recomputation every document is chunked, its whole graph kept.
    assert_eq!(StepPlan::new(&refs, 40, false), StepPlan { kept: vec![], chunked: vec![0, 1, 2, 3] });
    // A budget for everything: one group; the two short ones' padded size: those two together.
    assert_eq!(StepPlan::new(&refs, 100_000, true), StepPlan { kept: vec![vec![0, 1, 2, 3]], chunked: vec![] });
    let both = (costs[0].0 + costs[1].0) * costs[0].1.max(costs[1].1);
    assert_eq!(StepPlan::new(&refs, both, true).kept[0], vec![0, 1], "{costs:?}");
    assert_eq!(StepPlan::new(&refs, both - 1, true).kept[..2], [vec![0], vec![1]], "{costs:?}");
}

#[test]
fn documents_that_fit_one_batch_keep_their_graph_and_give_the_whole_graphs_gradients() {
    // Dropout off: the kept groups draw their masks in another order than the whole graph.
    let dir = tempfile::tempdir().unwrap();
    for (case, labels) in [
        ("hier/bert-attention", vec![vec![Some(0), Some(1), Some(2), Some(1)]]),
        ("hier/bert-multihead", vec![vec![Some(2), Some(1), Some(0), Some(0)]]),
        ("hier/trained-multitask", vec![vec![Some(0), None, Some(2), Some(1)], vec![Some(1), Some(0), None, Some(1)]]),
    ] {
        let model = HierarchicalClassifier::load(&without_dropout(case, dir.path()), true, &Device::Cpu).unwrap();
        let docs = documents(&model);
        let refs: Vec<&ChunkedDocument> = docs.iter().collect();
        let vars: Vec<Var> = model.trainable_vars();
        let weights = Tensor::new(&[1.0f32, 2.0, 0.5], &Device::Cpu).unwrap();
        let task_weights = [1.0, 0.5];
        let run = |max_batch_tokens: usize, recompute: bool| {
            let settings = BatchSettings {
                max_batch_tokens,
                recompute,
                loss: TaskLoss {
                    task_weights: &task_weights,
                    class_weights: Some(&weights),
                    offsets: None,
                    multi_label: None,
                },
                prefix: Prefix::None,
            };
            batch_gradients(&model, &refs, &labels, &vars, &DropoutRng::new(3), settings, &Device::Cpu).unwrap()
        };
        let whole = run(40, false);
        assert_eq!(whole.grads.len(), vars.len(), "{case}: every variable gets a gradient");
        // Recomputation alone (the two long documents) without dropout: the chunk vectors'
        // gradients are constants of the second pass (before commit 1326f73 they carried the head's
        // graph there, and the head's pooling weights got second-order terms: 0.1 off).
        let long: Vec<&ChunkedDocument> = docs.iter().filter(|d| !fits(d, 40)).collect();
        let long_labels: Vec<Vec<Option<usize>>> = labels.iter().map(|t| vec![t[2], t[3]]).collect();
        let long_run = |recompute: bool| {
            let settings = BatchSettings {
                max_batch_tokens: 40,
                recompute,
                loss: TaskLoss {
                    task_weights: &task_weights,
                    class_weights: Some(&weights),
                    offsets: None,
                    multi_label: None,
                },
                prefix: Prefix::None,
            };
            batch_gradients(&model, &long, &long_labels, &vars, &DropoutRng::new(3), settings, &Device::Cpu)
        };
        let (a, b) = (long_run(false).unwrap(), long_run(true).unwrap());
        let diff = largest_gradient_difference(&a, &b, &vars);
        assert!(diff <= 1e-5, "{case}: recomputed gradients differ by {diff}");
        // Kept and recomputed documents together (40), and every document kept in one group.
        for max_batch_tokens in [100_000, 64, 48, 40] {
            let plan = StepPlan::new(&refs, max_batch_tokens, true);
            assert!(!plan.kept.is_empty(), "{case}: some documents keep their graph");
            let parts = run(max_batch_tokens, true);
            assert!((parts.loss - whole.loss).abs() < 1e-5, "{case} {plan:?}: loss {} vs {}", parts.loss, whole.loss);
            assert_eq!(parts.grads.len(), vars.len(), "{case} {plan:?}");
            let diff = largest_gradient_difference(&whole, &parts, &vars);
            assert!(diff <= 1e-5, "{case} {plan:?}: largest gradient difference {diff}");
        }
    }
}

/// A step of two batches (`--grad-accum 2`) adds each batch's gradients, scaled by ½, into the
/// same totals as back-propagation reaches them: the mean of the two batches' gradients, which
/// is the gradient of the four documents as one batch (no class weights: each batch's mean
/// cross-entropy then weighs its documents alike), kept, recomputed or both.
#[test]
fn two_batches_of_a_step_add_up_to_the_gradient_of_the_whole_batch() {
    use longread_train::gradients::StepGradients;
    use longread_train::recompute::add_batch_gradients;
    let dir = tempfile::tempdir().unwrap();
    let model =
        HierarchicalClassifier::load(&without_dropout("hier/bert-attention", dir.path()), true, &Device::Cpu).unwrap();
    let docs = documents(&model);
    let vars: Vec<Var> = model.trainable_vars();
    let labels = [Some(0), Some(1), Some(2), Some(1)];
    let task_weights = [1.0];
    for (max_batch_tokens, recompute) in [(100_000, true), (40, true), (40, false)] {
        let settings = BatchSettings {
            max_batch_tokens,
            recompute,
            loss: TaskLoss { task_weights: &task_weights, class_weights: None, offsets: None, multi_label: None },
            prefix: Prefix::None,
        };
        let rng = DropoutRng::new(3);
        let all: Vec<&ChunkedDocument> = docs.iter().collect();
        let whole = batch_gradients(&model, &all, &[labels.to_vec()], &vars, &rng, settings, &Device::Cpu).unwrap();
        let mut step = StepGradients::scaled(0.5);
        let mut loss = 0.0;
        for half in [0..2, 2..4] {
            let part: Vec<&ChunkedDocument> = docs[half.clone()].iter().collect();
            let part_labels = vec![labels[half].to_vec()];
            let run = add_batch_gradients(&model, &part, &part_labels, &vars, &rng, settings, &Device::Cpu, &mut step);
            loss += 0.5 * run.unwrap();
        }
        let halves = longread_train::recompute::BatchGradients { loss, grads: step.into_map().unwrap() };
        let case = format!("budget {max_batch_tokens}, recompute {recompute}");
        assert!((halves.loss - whole.loss).abs() < 1e-5, "{case}: loss {} vs {}", halves.loss, whole.loss);
        assert_eq!(halves.grads.len(), vars.len(), "{case}: every variable gets a gradient");
        let diff = largest_gradient_difference(&whole, &halves, &vars);
        assert!(diff <= 1e-5, "{case}: largest gradient difference {diff}");
    }
}

/// A step's kept groups share one cast of each weight (`weight_casts::StepCasts`): in bf16 on
/// the CPU route, and on the GPU route (emulated, f32: its fused q/k/v weight and block-end
/// parameters, joined once per step). Two groups make no more casts than one, and their
/// gradients are those of each group making its own.
#[test]
fn a_steps_kept_groups_share_their_weight_casts() {
    shared_casts_case(candle_core::DType::BF16, false);
    longread_model::route::emulate_gpu(|| shared_casts_case(candle_core::DType::F32, true));
}

fn shared_casts_case(dtype: candle_core::DType, gpu_route: bool) {
    use longread_model::layers::weight_casts::{self, StepCasts};
    use longread_train::gradients::StepGradients;
    use longread_train::recompute::add_batch_gradients;
    let dir = tempfile::tempdir().unwrap();
    let mut model =
        HierarchicalClassifier::load(&without_dropout("hier/bert-attention", dir.path()), true, &Device::Cpu).unwrap();
    model.set_precision(dtype).unwrap();
    let docs = documents(&model);
    let vars: Vec<Var> = model.trainable_vars();
    let labels = [Some(0), Some(1)];
    let task_weights = [1.0];
    let settings = BatchSettings {
        max_batch_tokens: 40,
        recompute: true,
        loss: TaskLoss { task_weights: &task_weights, class_weights: None, offsets: None, multi_label: None },
        prefix: Prefix::None,
    };
    let rng = DropoutRng::new(3);
    let both: Vec<&ChunkedDocument> = docs[..2].iter().collect();
    assert_eq!(StepPlan::new(&both, 40, true).kept, vec![vec![0], vec![1]], "two kept groups");
    // Casts made by one group and by two, counted in an outer scope of the test's own.
    let casts_of = |part: &[&ChunkedDocument], labels: &[Option<usize>]| {
        let _scope = StepCasts::begin();
        let out = batch_gradients(&model, part, &[labels.to_vec()], &vars, &rng, settings, &Device::Cpu).unwrap();
        (weight_casts::kept(), out)
    };
    let case = format!("{dtype:?}, GPU route {gpu_route}");
    let (one, _) = casts_of(&both[..1], &labels[..1]);
    let (two, shared) = casts_of(&both, &labels);
    assert!(one > 0, "{case}: the weights are cast or joined for the products");
    assert_eq!(two, one, "{case}: the second group reuses the first group's");
    assert_eq!(weight_casts::kept(), 0, "{case}: the scope's end drops them");
    // Each document a batch of its own (its own scope, its own casts), at ½ each.
    let mut step = StepGradients::scaled(0.5);
    let mut loss = 0.0;
    for d in 0..2 {
        let part = &both[d..d + 1];
        let run = add_batch_gradients(&model, part, &[vec![labels[d]]], &vars, &rng, settings, &Device::Cpu, &mut step);
        loss += 0.5 * run.unwrap();
    }
    let separate = longread_train::recompute::BatchGradients { loss, grads: step.into_map().unwrap() };
    assert!((separate.loss - shared.loss).abs() < 1e-6, "{case}: loss {} vs {}", separate.loss, shared.loss);
    let diff = largest_gradient_difference(&shared, &separate, &vars);
    assert!(diff <= 1e-6, "{case}: largest gradient difference {diff}");
}

/// On the GPU route (emulated: f32 on the CPU, dropout on) a step of two kept groups and a
/// recomputed document gives its weights the same bits with the joined weights as leaves of the
/// step's graphs (`weight_casts::joined`, handed to their parts at the step's end) as joined
/// with their graph in each group (`LONGREAD_JOINED_LEAVES=off`'s route).
#[test]
fn joined_leaves_give_the_bits_of_joining_with_the_graph() {
    use longread_model::layers::weight_casts::{self, StepCasts};
    longread_model::route::emulate_gpu(|| {
        let model = HierarchicalClassifier::load(&fixture("hier/bert-attention"), true, &Device::Cpu).unwrap();
        let docs = documents(&model);
        let refs: Vec<&ChunkedDocument> = docs.iter().collect();
        let plan = StepPlan::new(&refs, 40, true);
        assert!(plan.kept.len() >= 2 && !plan.chunked.is_empty(), "kept groups and a recomputed document: {plan:?}");
        let labels = vec![vec![Some(0), Some(1), Some(2), Some(1)]];
        let vars: Vec<Var> = model.trainable_vars();
        let run = |leaves: bool| {
            weight_casts::with_joined_leaves(leaves, || {
                let settings = BatchSettings {
                    max_batch_tokens: 40,
                    recompute: true,
                    loss: TaskLoss { task_weights: &[], class_weights: None, offsets: None, multi_label: None },
                    prefix: Prefix::None,
                };
                let scope = StepCasts::begin();
                let out = batch_gradients(&model, &refs, &labels, &vars, &DropoutRng::new(5), settings, &Device::Cpu);
                let leaves_made = weight_casts::joined_leaves().len();
                drop(scope);
                (out.unwrap(), leaves_made)
            })
        };
        let ((with, made), (without, none)) = (run(true), run(false));
        assert!(made > 0 && none == 0, "leaves made: {made} with, {none} without");
        assert_eq!(with.loss, without.loss);
        assert_eq!(with.grads.len(), vars.len(), "every variable gets a gradient");
        assert_eq!(largest_gradient_difference(&with, &without, &vars), 0.0, "the same bits");
    });
}

#[test]
fn kept_groups_with_dropout_on_are_deterministic_and_draw_their_masks() {
    let model = HierarchicalClassifier::load(&fixture("hier/bert-attention"), true, &Device::Cpu).unwrap();
    let docs = documents(&model);
    let refs: Vec<&ChunkedDocument> = docs.iter().collect();
    let labels = vec![vec![Some(0), Some(1), Some(2), Some(1)]];
    let vars: Vec<Var> = model.trainable_vars();
    let run = |seed: u64| {
        let settings = BatchSettings {
            max_batch_tokens: 40,
            recompute: true,
            loss: TaskLoss { task_weights: &[], class_weights: None, offsets: None, multi_label: None },
            prefix: Prefix::None,
        };
        batch_gradients(&model, &refs, &labels, &vars, &DropoutRng::new(seed), settings, &Device::Cpu).unwrap()
    };
    let (a, b, other) = (run(7), run(7), run(8));
    assert_eq!(a.loss, b.loss);
    assert_eq!(largest_gradient_difference(&a, &b, &vars), 0.0, "the same seed, the same gradients");
    assert!((a.loss - other.loss).abs() > 1e-6, "dropout is on in the kept groups");
}

#[test]
fn recomputed_gradients_equal_full_graph_gradients_with_dropout_on() {
    for case in ["hier/bert-attention", "hier/bert-multihead"] {
        let model = HierarchicalClassifier::load(&fixture(case), true, &Device::Cpu).unwrap();
        let docs = documents(&model);
        // The documents longer than one 40-token batch: all of them recomputed (the shorter
        // ones would keep their graph: `documents_that_fit_one_batch_keep_their_graph`).
        let refs: Vec<&ChunkedDocument> = docs.iter().filter(|d| !fits(d, 40)).collect();
        assert_eq!(refs.len(), 2, "two fixture documents are longer than a batch");
        assert!(StepPlan::new(&refs, 40, true).kept.is_empty());
        let labels = vec![vec![Some(0), Some(2)]];
        let vars: Vec<Var> = model.trainable_vars();
        assert!(vars.len() > 30, "encoder and head variables");
        let weights = Tensor::new(&[1.0f32, 2.0, 0.5], &Device::Cpu).unwrap();
        let run = |recompute: bool| {
            let settings = BatchSettings {
                max_batch_tokens: 40,
                recompute,
                loss: TaskLoss { task_weights: &[], class_weights: Some(&weights), offsets: None, multi_label: None },
                prefix: Prefix::None,
            };
            batch_gradients(&model, &refs, &labels, &vars, &DropoutRng::new(11), settings, &Device::Cpu).unwrap()
        };
        let (full, chunked) = (run(false), run(true));
        assert!((full.loss - chunked.loss).abs() < 1e-6, "{case}: loss {} vs {}", full.loss, chunked.loss);
        assert_eq!(full.grads.len(), vars.len(), "{case}: every variable gets a gradient");
        assert_eq!(chunked.grads.len(), vars.len());
        let mut largest = 0f32;
        for v in &vars {
            let (a, b) = (&full.grads[&v.as_tensor().id()], &chunked.grads[&v.as_tensor().id()]);
            let diff =
                a.sub(b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
            largest = largest.max(diff);
        }
        assert!(largest <= 1e-5, "{case}: largest gradient difference {largest}");
        // Dropout really was on: another seed gives another loss.
        let other = batch_gradients(
            &model,
            &refs,
            &labels,
            &vars,
            &DropoutRng::new(12),
            BatchSettings {
                max_batch_tokens: 40,
                recompute: true,
                loss: TaskLoss { task_weights: &[], class_weights: Some(&weights), offsets: None, multi_label: None },
                prefix: Prefix::None,
            },
            &Device::Cpu,
        )
        .unwrap();
        assert!((other.loss - full.loss).abs() > 1e-6, "{case}: dropout must change the loss");
    }
}

#[test]
fn cached_frozen_prefix_gives_the_gradients_of_recomputing_it() {
    let model = HierarchicalClassifier::load(&fixture("hier/bert-attention"), true, &Device::Cpu).unwrap();
    let docs = documents(&model);
    let refs: Vec<&ChunkedDocument> = docs.iter().collect();
    let labels = vec![vec![Some(0), Some(1), Some(2), Some(1)]];
    // Embeddings and layer 0 frozen: layer 1, pooling and head train.
    let vars: Vec<Var> = model
        .named_vars()
        .into_iter()
        .filter(|(n, _)| !n.starts_with("encoder:embeddings") && !n.starts_with("encoder:encoder.layer.0."))
        .map(|(_, v)| v)
        .collect();
    let doc_ids: Vec<usize> = (0..docs.len()).collect();
    let spill = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let store = open_store(&model, store_dir.path(), 1, "F32").unwrap();
    let build = |memory_limit: usize, store: Option<&DocumentStore>| {
        let storage = Storage { memory_limit, spill_dir: spill.path(), store };
        PrefixCache::build(&model, &docs, 1, 40, storage, &Device::Cpu, |_| {}).unwrap()
    };
    let in_memory = build(usize::MAX, None);
    let on_disk = build(0, None);
    assert_eq!(on_disk.bytes_in_memory(), 0);
    assert!(on_disk.bytes_on_disk() > 0 && in_memory.bytes_on_disk() == 0);
    let stored = build(0, Some(&store));
    assert_eq!((stored.bytes_in_memory(), stored.bytes_on_disk(), stored.chunks_reused()), (0, 0, 0));
    let read_back = build(0, Some(&store));
    let chunks: usize = docs.iter().map(|d| d.chunks.len()).sum();
    assert_eq!(read_back.chunks_reused(), chunks, "the second build reads every chunk from the store");
    let run = |recompute: bool, prefix: Prefix| {
        let settings = BatchSettings {
            max_batch_tokens: 40,
            recompute,
            loss: TaskLoss { task_weights: &[], class_weights: None, offsets: None, multi_label: None },
            prefix,
        };
        batch_gradients(&model, &refs, &labels, &vars, &DropoutRng::new(5), settings, &Device::Cpu).unwrap()
    };
    // Against the frozen layers computed in each step, with the same plan (two short documents
    // keep their graph, two long ones are recomputed) and so the same dropout masks; and the
    // whole graph against the whole graph.
    let reference = run(true, Prefix::Frozen { layers: 1 });
    let whole = run(false, Prefix::Frozen { layers: 1 });
    assert_eq!(reference.grads.len(), vars.len(), "every trainable variable gets a gradient");
    for (what, reference, out) in [
        ("cached in memory", &reference, run(true, Prefix::Cached { cache: &in_memory, doc_ids: &doc_ids })),
        ("cached on disk", &reference, run(true, Prefix::Cached { cache: &on_disk, doc_ids: &doc_ids })),
        ("stored", &reference, run(true, Prefix::Cached { cache: &stored, doc_ids: &doc_ids })),
        ("read back from the store", &reference, run(true, Prefix::Cached { cache: &read_back, doc_ids: &doc_ids })),
        ("cached, full graph", &whole, run(false, Prefix::Cached { cache: &in_memory, doc_ids: &doc_ids })),
    ] {
        assert!((out.loss - reference.loss).abs() < 1e-6, "{what}: loss {} vs {}", out.loss, reference.loss);
        for v in &vars {
            let (a, b) = (&reference.grads[&v.as_tensor().id()], &out.grads[&v.as_tensor().id()]);
            let diff =
                a.sub(b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
            assert!(diff <= 1e-5, "{what}: gradient differs by {diff}");
        }
    }
    // The comparison above is not vacuous: dropout in the trainable top is on.
    let other = batch_gradients(
        &model,
        &refs,
        &labels,
        &vars,
        &DropoutRng::new(6),
        BatchSettings {
            max_batch_tokens: 40,
            recompute: true,
            loss: TaskLoss { task_weights: &[], class_weights: None, offsets: None, multi_label: None },
            prefix: Prefix::Frozen { layers: 1 },
        },
        &Device::Cpu,
    )
    .unwrap();
    assert!((other.loss - reference.loss).abs() > 1e-6, "dropout above the frozen layers is on");
}

/// The largest absolute difference between two caches' states of every chunk.
fn largest_state_difference(a: &PrefixCache, b: &PrefixCache, docs: &[ChunkedDocument]) -> f32 {
    let mut largest = 0f32;
    for (d, doc) in docs.iter().enumerate() {
        for c in 0..doc.chunks.len() {
            let (x, y) = (a.get(d, c, 0).unwrap(), b.get(d, c, 0).unwrap());
            assert_eq!(x.dims(), y.dims());
            let diff = x.sub(&y).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap();
            largest = largest.max(diff.to_scalar::<f32>().unwrap());
        }
    }
    largest
}

#[test]
fn an_interrupted_prefix_store_fill_resumes_where_it_stopped() {
    let model = HierarchicalClassifier::load(&fixture("hier/bert-attention"), true, &Device::Cpu).unwrap();
    let docs = documents(&model);
    let spill = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&model, dir.path(), 1, "F32").unwrap();
    let build = |docs: &[ChunkedDocument], store: Option<&DocumentStore>, encoded: &mut usize| {
        let storage = Storage { memory_limit: usize::MAX, spill_dir: spill.path(), store };
        let mut ticks = 0;
        let cache = PrefixCache::build(&model, docs, 1, 40, storage, &Device::Cpu, |n| ticks += n).unwrap();
        assert_eq!(ticks, docs.iter().map(|d| d.chunks.len()).sum::<usize>(), "progress counts every chunk");
        *encoded = ticks - cache.chunks_reused();
        cache
    };
    let mut encoded = 0;
    // A fill stopped after the first two documents left their files in the store.
    build(&docs[..2], Some(&store), &mut encoded);
    let first_two: usize = docs[..2].iter().map(|d| d.chunks.len()).sum();
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2, "one file per document");
    let resumed = build(&docs, Some(&store), &mut encoded);
    assert_eq!(resumed.chunks_reused(), first_two, "the rerun reads what was stored");
    assert_eq!(encoded, docs.iter().map(|d| d.chunks.len()).sum::<usize>() - first_two, "and encodes the rest");
    let fresh = build(&docs, None, &mut encoded);
    assert!(largest_state_difference(&resumed, &fresh, &docs) == 0.0, "stored states equal fresh ones");

    // A damaged file is a miss (recomputed), never a wrong hit.
    let victim = store.path(&docs[0]);
    let bytes = std::fs::read(&victim).unwrap();
    std::fs::write(&victim, &bytes[..bytes.len() - 4]).unwrap();
    let repaired = build(&docs, Some(&store), &mut encoded);
    assert_eq!(encoded, docs[0].chunks.len(), "only the damaged document is encoded again");
    assert!(largest_state_difference(&repaired, &fresh, &docs) == 0.0);
    assert_eq!(std::fs::read(&victim).unwrap(), bytes, "and its file is written whole again");

    // Another number of frozen layers is another key.
    let two_layers = open_store(&model, dir.path(), 2, "F32").unwrap();
    assert_ne!(two_layers.path(&docs[0]), store.path(&docs[0]));
}

#[test]
fn a_multi_label_loss_splits_into_shares_that_add_up_to_the_whole_steps() {
    // The loss of label sets (binary cross-entropy over documents × labels, with positive
    // weights) recomputed chunk by chunk and in groups gives the whole graph's loss and gradients.
    let dir = tempfile::tempdir().unwrap();
    let model =
        HierarchicalClassifier::load(&without_dropout("hier/bert-attention", dir.path()), true, &Device::Cpu).unwrap();
    let docs = documents(&model);
    let refs: Vec<&ChunkedDocument> = docs.iter().collect();
    let vars: Vec<Var> = model.trainable_vars();
    let sets: Vec<Vec<usize>> = vec![vec![0, 2], vec![], vec![1], vec![0, 1, 2]];
    let marked = vec![vec![Some(0); sets.len()]];
    let pos_weight = Tensor::new(&[2.0f32, 1.0, 4.0], &Device::Cpu).unwrap();
    let multi = MultiLabelGold { sets: &sets, labels: 3, pos_weight: Some(&pos_weight) };
    let run = |max_batch_tokens: usize, recompute: bool| {
        let settings = BatchSettings {
            max_batch_tokens,
            recompute,
            loss: TaskLoss { task_weights: &[], class_weights: None, offsets: None, multi_label: Some(multi) },
            prefix: Prefix::None,
        };
        batch_gradients(&model, &refs, &marked, &vars, &DropoutRng::new(3), settings, &Device::Cpu).unwrap()
    };
    let whole = run(40, false);
    assert!(whole.loss.is_finite() && whole.loss > 0.0, "{}", whole.loss);
    for max_batch_tokens in [100_000, 48, 40] {
        let parts = run(max_batch_tokens, true);
        assert!((parts.loss - whole.loss).abs() < 1e-5, "{max_batch_tokens}: loss {} vs {}", parts.loss, whole.loss);
        let diff = largest_gradient_difference(&whole, &parts, &vars);
        assert!(diff <= 1e-5, "{max_batch_tokens}: gradients differ by {diff}");
    }
    // Another document's set changes the loss: the sets are read, not ignored.
    let other: Vec<Vec<usize>> = vec![vec![0, 2], vec![1], vec![1], vec![0, 1, 2]];
    let settings = BatchSettings {
        max_batch_tokens: 40,
        recompute: false,
        loss: TaskLoss {
            task_weights: &[],
            class_weights: None,
            offsets: None,
            multi_label: Some(MultiLabelGold { sets: &other, ..multi }),
        },
        prefix: Prefix::None,
    };
    let changed = batch_gradients(&model, &refs, &marked, &vars, &DropoutRng::new(3), settings, &Device::Cpu).unwrap();
    assert!((changed.loss - whole.loss).abs() > 1e-4);
}
