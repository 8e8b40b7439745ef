//! Self-contained HTML reports: for each document the predicted label and scores, a bar
//! chart of chunk attention, and the text with each chunk shaded by its attention; for a HAN,
//! a chart of sentence attention and the text with each sentence marked by its attention and
//! each word shaded by its attention (as in Yang et al. 2016).
#![deny(missing_docs)]

pub mod curves;
mod escape;
mod font;
#[cfg(feature = "predictions")]
mod from_prediction;
mod raster;
mod svg;

use std::fmt::Write;

pub use escape::escape_html;

/// One chunk of a document as the report shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkView {
    /// Window index in the document.
    pub index: usize,
    /// First character (Unicode scalar value offset).
    pub start: usize,
    /// End character (exclusive).
    pub end: usize,
    /// The chunk's contribution.
    pub attention: f32,
    /// The predicted label's probability minus its probability without the chunk (a
    /// classifier with occlusion on; `None` otherwise).
    pub occlusion: Option<f32>,
}

/// A word of a HAN's sentence: where it is (characters) and its attention in the sentence.
#[derive(Debug, Clone, PartialEq)]
pub struct WordView {
    /// First character.
    pub start: usize,
    /// End character (exclusive).
    pub end: usize,
    /// Its weight in the sentence.
    pub attention: f32,
}

/// A sentence a HAN read: where it is (characters), its attention and its words.
#[derive(Debug, Clone, PartialEq)]
pub struct SentenceView {
    /// First character.
    pub start: usize,
    /// End character (exclusive).
    pub end: usize,
    /// Its weight in the document.
    pub attention: f32,
    /// Its words.
    pub words: Vec<WordView>,
}

/// One document as the report shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentView<'a> {
    /// Its id.
    pub id: String,
    /// Its full text.
    pub text: &'a str,
    /// `(label, probability)` for every label; empty when the document failed.
    pub scores: Vec<(String, f32)>,
    /// The label the model gave (its decision rule's, which may not be the most probable);
    /// `None`: the most probable label is shown.
    pub label: Option<String>,
    /// Multi-label models: the labels the document carries (possibly none).
    pub labels: Option<Vec<String>>,
    /// Its chunks (hierarchical and single-chunk models).
    pub chunks: Vec<ChunkView>,
    /// Its sentences (HAN models; then `chunks` is empty).
    pub sentences: Vec<SentenceView>,
    /// Ensembles: each member's `(model, weight, label, probability of that label)`.
    pub members: Vec<MemberView>,
    /// A bag of words: the terms that raised the decided label(s) most (then `chunks` and
    /// `sentences` are empty).
    pub terms: Vec<TermView>,
    /// A multi-label model with label-wise attention or occlusion: for each label the
    /// document carries, the chunk that label attended to most, and the chunk whose removal
    /// lowered its probability most.
    pub label_evidence: Vec<LabelEvidence>,
    /// Why it could not be classified.
    pub error: Option<String>,
}

/// The chunk that drove one carried label, by label-wise attention or by occlusion.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelEvidence {
    /// How it was found.
    pub by: EvidenceBy,
    /// The label.
    pub label: String,
    /// The chunk's window index.
    pub index: usize,
    /// Its first character.
    pub start: usize,
    /// Its end character (exclusive).
    pub end: usize,
    /// The label's weight of it (attention: the label's weights over the chunks sum to 1), or
    /// its probability minus its probability without the chunk (occlusion).
    pub weight: f32,
}

/// A term of a document read by a bag of words, and how far it raised a label.
#[derive(Debug, Clone, PartialEq)]
pub struct TermView {
    /// The label it raised.
    pub label: String,
    /// The n-gram.
    pub term: String,
    /// TF-IDF value × the label's weight (log-odds).
    pub contribution: f32,
    /// Where it occurs: `[start, end)` in characters.
    pub spans: Vec<[usize; 2]>,
}

/// How a label's chunk was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvidenceBy {
    /// The chunk the label attended to most (label-wise attention).
    Attention,
    /// The chunk whose removal lowered the label's probability most (occlusion).
    Occlusion,
}

/// What one member of an ensemble predicted.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberView {
    /// The member's directory inside the ensemble's.
    pub model: String,
    /// Its weight in the average.
    pub weight: f64,
    /// Its most probable label.
    pub label: String,
    /// That label's probability.
    pub probability: f32,
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:960px;margin:2em auto;color:#222}\
section{border-top:1px solid #ccc;padding:1em 0}h2{font-size:1.1em}.label{font-weight:bold;font-size:1.3em}\
table.scores td{padding:0 .6em}.bar{background:#4a7ab5;height:.8em;display:inline-block}\
.text{white-space:pre-wrap;line-height:1.5;border:1px solid #eee;padding:.8em;max-height:40em;overflow:auto}\
.error{color:#b00}.legend{color:#666;font-size:.9em}\
.sentence{border-left:6px solid;padding-left:.3em}";

/// Renders every document into one self-contained HTML page (no external resources).
pub fn render_html(title: &str, model: &str, documents: &[DocumentView]) -> String {
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title><style>{STYLE}</style></head>\
         <body><h1>{t}</h1><p class=\"legend\">Model: {m}. {n} documents. The shading of the text shows the attention of the \
         chunks that cover it (darker = more attention; where chunks overlap, the larger value); for a HAN model, \
         the bar left of each sentence shows its sentence attention (red) and each word's shading its word \
         attention (blue), scaled by √(sentence attention) as in Yang et al. (2016); for a bag of words, the green \
         shading marks the terms that raised its label (darker = a larger contribution).</p>",
        t = escape_html(title),
        m = escape_html(model),
        n = documents.len()
    );
    for doc in documents {
        render_document(&mut html, doc);
    }
    html.push_str("</body></html>\n");
    html
}

fn render_document(html: &mut String, doc: &DocumentView) {
    let _ = write!(html, "<section><h2>{}</h2>", escape_html(&doc.id));
    if let Some(error) = &doc.error {
        let _ = write!(html, "<p class=\"error\">Not classified: {}</p></section>", escape_html(error));
        return;
    }
    let given = doc.label.as_ref().and_then(|label| doc.scores.iter().find(|(l, _)| l == label));
    let best = given.or_else(|| doc.scores.iter().max_by(|a, b| a.1.total_cmp(&b.1)));
    if let Some(labels) = &doc.labels {
        let named: Vec<String> =
            labels.iter().map(|l| format!("<span class=\"label\">{}</span>", escape_html(l))).collect();
        match named.is_empty() {
            true => html.push_str("<p>Predicted: none of the labels</p>"),
            false => {
                let _ = write!(html, "<p>Predicted: {}</p>", named.join(", "));
            }
        }
    } else if let Some((label, p)) = best {
        let _ =
            write!(html, "<p>Predicted: <span class=\"label\">{}</span> ({:.1}%)</p>", escape_html(label), p * 100.0);
    }
    label_evidence(html, doc);
    html.push_str("<table class=\"scores\">");
    for (label, p) in &doc.scores {
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{:.3}</td><td><span class=\"bar\" style=\"width:{:.0}px\"></span></td></tr>",
            escape_html(label),
            p,
            p * 300.0
        );
    }
    html.push_str("</table>");
    if !doc.members.is_empty() {
        html.push_str("<p class=\"legend\">Ensemble of ");
        for (i, m) in doc.members.iter().enumerate() {
            let _ = write!(
                html,
                "{}{} (weight {:.2}): {} ({:.1}%)",
                if i > 0 { "; " } else { "" },
                escape_html(&m.model),
                m.weight,
                escape_html(&m.label),
                m.probability * 100.0
            );
        }
        html.push_str("</p>");
    }
    if !doc.terms.is_empty() {
        term_lists(html, &doc.terms);
        html.push_str("<div class=\"text\">");
        term_text(html, doc.text, &doc.terms);
    } else if doc.sentences.is_empty() {
        html.push_str(&svg::attention_chart(&doc.chunks, "chunk"));
        html.push_str(&svg::occlusion_chart(&doc.chunks));
        html.push_str("<div class=\"text\">");
        shaded_text(html, doc.text, &doc.chunks);
    } else {
        let bars: Vec<ChunkView> = doc
            .sentences
            .iter()
            .enumerate()
            .map(|(index, s)| ChunkView { index, start: s.start, end: s.end, attention: s.attention, occlusion: None })
            .collect();
        html.push_str(&svg::attention_chart(&bars, "sentence"));
        html.push_str("<div class=\"text\">");
        sentence_text(html, doc.text, &doc.sentences);
    }
    html.push_str("</div></section>");
}

/// Characters of a chunk shown beside the label it drove.
const EXCERPT_CHARS: usize = 240;

/// For each carried label, the chunk it attended to most and the chunk it lost most
/// without, with the start of its text.
fn label_evidence(html: &mut String, doc: &DocumentView) {
    for (by, legend) in [
        (EvidenceBy::Attention, "The chunk each label attended to most (label-wise attention):"),
        (EvidenceBy::Occlusion, "The chunk each label lost most without (occlusion):"),
    ] {
        let evidence: Vec<&LabelEvidence> = doc.label_evidence.iter().filter(|e| e.by == by).collect();
        if evidence.is_empty() {
            continue;
        }
        let _ = write!(html, "<p class=\"legend\">{legend}</p><ul>");
        for e in evidence {
            let excerpt: String = doc.text.chars().skip(e.start).take((e.end - e.start).min(EXCERPT_CHARS)).collect();
            let more = if e.end - e.start > EXCERPT_CHARS { "…" } else { "" };
            let weight = match by {
                EvidenceBy::Attention => format!("weight {:.2}", e.weight),
                EvidenceBy::Occlusion => format!("probability {:.3} lower without it", e.weight),
            };
            let _ = write!(
                html,
                "<li><span class=\"label\">{}</span>: chunk {} (characters {}–{}, {weight}): <q>{}{more}</q></li>",
                escape_html(&e.label),
                e.index,
                e.start,
                e.end,
                escape_html(&excerpt)
            );
        }
        html.push_str("</ul>");
    }
}

/// The text with each sentence the model read marked by its attention (a red bar, relative to
/// the document's largest) and each of its words shaded blue by word attention × √(sentence
/// attention), relative to the document's largest such value; text the model did not read
/// stays plain.
fn sentence_text(html: &mut String, text: &str, sentences: &[SentenceView]) {
    let byte_at: Vec<usize> = text.char_indices().map(|(b, _)| b).chain(std::iter::once(text.len())).collect();
    let n_chars = byte_at.len() - 1;
    let piece = |a: usize, b: usize| {
        let (a, b) = (a.min(n_chars), b.min(n_chars));
        escape_html(&text[byte_at[a]..byte_at[b.max(a)]])
    };
    let top_sentence = sentences.iter().map(|s| s.attention).fold(0.0f32, f32::max).max(f32::MIN_POSITIVE);
    let weight = |s: &SentenceView, w: &WordView| w.attention * s.attention.max(0.0).sqrt();
    let top_word = sentences
        .iter()
        .flat_map(|s| s.words.iter().map(move |w| weight(s, w)))
        .fold(0.0f32, f32::max)
        .max(f32::MIN_POSITIVE);
    let mut at = 0;
    for (i, s) in sentences.iter().enumerate() {
        html.push_str(&piece(at, s.start));
        let red = 0.08 + 0.82 * (s.attention / top_sentence).clamp(0.0, 1.0);
        let _ = write!(
            html,
            "<span class=\"sentence\" style=\"border-color:rgba(220,40,40,{red:.3})\" \
             title=\"sentence #{i}: attention {:.3}\">",
            s.attention
        );
        let mut pos = s.start;
        for w in &s.words {
            html.push_str(&piece(pos, w.start));
            let blue = 0.7 * (weight(s, w) / top_word).clamp(0.0, 1.0);
            let _ = write!(
                html,
                "<span style=\"background:rgba(60,110,230,{blue:.3})\" title=\"word attention {:.3}\">{}</span>",
                w.attention,
                piece(w.start, w.end)
            );
            pos = w.end;
        }
        html.push_str(&piece(pos, s.end));
        html.push_str("</span>");
        at = s.end;
    }
    html.push_str(&piece(at, n_chars));
}

/// For each label with terms, the terms that raised it, largest first, with their contributions.
fn term_lists(html: &mut String, terms: &[TermView]) {
    let mut labels: Vec<&str> = terms.iter().map(|t| t.label.as_str()).collect();
    labels.dedup();
    for label in labels {
        let named: Vec<String> = terms
            .iter()
            .filter(|t| t.label == label)
            .map(|t| format!("<q>{}</q> +{:.3}", escape_html(&t.term), t.contribution))
            .collect();
        let _ = write!(
            html,
            "<p class=\"legend\">The terms that raised <span class=\"label\">{}</span> most (TF-IDF value × weight, \
             log-odds): {}</p>",
            escape_html(label),
            named.join(", ")
        );
    }
}

/// The text with every occurrence of the terms shaded green by their contribution, relative to
/// the largest (where terms overlap, the larger; a bigram covers its words).
fn term_text(html: &mut String, text: &str, terms: &[TermView]) {
    let top = terms.iter().map(|t| t.contribution).fold(0.0f32, f32::max).max(f32::MIN_POSITIVE);
    let spans: Vec<(usize, usize, &TermView)> =
        terms.iter().flat_map(|t| t.spans.iter().map(move |&[a, b]| (a, b, t))).filter(|(a, b, _)| a < b).collect();
    for (a, b, piece) in cut_at(text, spans.iter().map(|&(a, b, _)| (a, b))) {
        let piece = escape_html(piece);
        let covering = spans.iter().filter(|&&(s, e, _)| s <= a && b <= e).map(|&(_, _, t)| t);
        match covering.max_by(|x, y| x.contribution.total_cmp(&y.contribution)) {
            None => html.push_str(&piece),
            Some(t) => {
                let alpha = 0.15 + 0.6 * (t.contribution / top).clamp(0.0, 1.0);
                let _ = write!(
                    html,
                    "<span style=\"background:rgba(60,170,90,{alpha:.3})\" title=\"{}: {} +{:.3}\">{piece}</span>",
                    escape_html(&t.label),
                    escape_html(&t.term),
                    t.contribution
                );
            }
        }
    }
}

/// `text` cut at every boundary of `spans` (`[start, end)` in characters, clipped to the text):
/// each piece's character range and its text, in order, together the whole text.
fn cut_at(text: &str, spans: impl Iterator<Item = (usize, usize)>) -> Vec<(usize, usize, &str)> {
    let byte_at: Vec<usize> = text.char_indices().map(|(b, _)| b).chain(std::iter::once(text.len())).collect();
    let n_chars = byte_at.len() - 1;
    let mut cuts: Vec<usize> = spans.flat_map(|(a, b)| [a.min(n_chars), b.min(n_chars)]).collect();
    cuts.extend([0, n_chars]);
    cuts.sort_unstable();
    cuts.dedup();
    cuts.windows(2).map(|w| (w[0], w[1], &text[byte_at[w[0]]..byte_at[w[1]]])).collect()
}

/// The text cut at every chunk boundary; each piece shaded by the largest attention of the
/// chunks covering it, relative to the document's largest.
fn shaded_text(html: &mut String, text: &str, chunks: &[ChunkView]) {
    let top = chunks.iter().map(|c| c.attention).fold(0.0f32, f32::max).max(f32::MIN_POSITIVE);
    for (a, b, piece) in cut_at(text, chunks.iter().map(|c| (c.start, c.end))) {
        let piece = escape_html(piece);
        let covering: Vec<&ChunkView> = chunks.iter().filter(|c| c.start <= a && b <= c.end).collect();
        match covering.iter().map(|c| c.attention).reduce(f32::max) {
            None => html.push_str(&piece),
            Some(att) => {
                let alpha = 0.06 + 0.64 * (att / top).clamp(0.0, 1.0);
                let names: Vec<String> =
                    covering.iter().map(|c| format!("#{} ({:.3})", c.index, c.attention)).collect();
                let _ = write!(
                    html,
                    "<span style=\"background:rgba(255,140,0,{alpha:.3})\" title=\"chunk {}\">{piece}</span>",
                    names.join(", ")
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc<'a>(text: &'a str, chunks: Vec<ChunkView>) -> DocumentView<'a> {
        DocumentView {
            id: "d<1>".into(),
            text,
            scores: vec![("a".into(), 0.25), ("b".into(), 0.75)],
            label: None,
            labels: None,
            chunks,
            sentences: Vec::new(),
            members: Vec::new(),
            terms: Vec::new(),
            label_evidence: Vec::new(),
            error: None,
        }
    }

    #[test]
    fn a_bag_of_words_lists_its_terms_and_shades_where_they_occur() {
        let term = |term: &str, contribution, spans: Vec<[usize; 2]>| TermView {
            label: "b".into(),
            term: term.into(),
            contribution,
            spans,
        };
        let text = "Ünï war <now> war zone";
        let terms = vec![term("war", 0.4, vec![[4, 7], [14, 17]]), term("war zone", 0.2, vec![[14, 22]])];
        let html = render_html("r", "m", &[DocumentView { terms, ..doc(text, vec![]) }]);
        assert!(
            html.contains("raised <span class=\"label\">b</span> most (TF-IDF value × weight, log-odds): <q>war</q> +0.400, <q>war zone</q> +0.200"),
            "{html}"
        );
        // The strongest term is the darkest; where the bigram covers it, the unigram's shade wins.
        assert!(html.contains("rgba(60,170,90,0.750)\" title=\"b: war +0.400\">war</span> &lt;now&gt; "), "{html}");
        assert!(html.contains("title=\"b: war +0.400\">war</span><span style=\"background:rgba(60,170,90,0.450)\" title=\"b: war zone +0.200\"> zone</span>"), "{html}");
        assert!(html.contains("Ünï "), "character offsets: {html}");
        assert!(!html.contains("attention per chunk"), "no chunk chart for a bag of words");
    }

    #[test]
    fn the_label_shown_is_the_one_the_model_gave() {
        let html = render_html("r", "m", &[DocumentView { label: Some("a".into()), ..doc("text", vec![]) }]);
        assert!(html.contains("Predicted: <span class=\"label\">a</span> (25.0%)"), "{html}");
    }

    #[test]
    fn a_multi_label_document_shows_its_set_of_labels() {
        let carried = DocumentView { labels: Some(vec!["a".into(), "b<".into()]), ..doc("text", vec![]) };
        let none = DocumentView { labels: Some(vec![]), ..doc("text", vec![]) };
        let html = render_html("r", "m", &[carried, none]);
        assert!(html.contains("Predicted: <span class=\"label\">a</span>, <span class=\"label\">b&lt;</span></p>"));
        assert!(html.contains("Predicted: none of the labels") && !html.contains("(75.0%)"), "{html}");
    }

    #[test]
    fn each_carried_label_names_the_chunk_it_attended_to_most_and_the_one_it_lost_most_without() {
        let evidence = vec![
            LabelEvidence { by: EvidenceBy::Attention, label: "b<".into(), index: 2, start: 4, end: 8, weight: 0.61 },
            LabelEvidence { by: EvidenceBy::Occlusion, label: "b<".into(), index: 1, start: 0, end: 4, weight: 0.25 },
        ];
        let carried = DocumentView {
            labels: Some(vec!["b<".into()]),
            label_evidence: evidence,
            ..doc("the violent part here", vec![])
        };
        let html = render_html("r", "m", &[carried]);
        assert!(
            html.contains("<span class=\"label\">b&lt;</span>: chunk 2 (characters 4–8, weight 0.61): <q>viol</q>"),
            "{html}"
        );
        assert!(html.contains("lost most without (occlusion)"), "{html}");
        assert!(html.contains("chunk 1 (characters 0–4, probability 0.250 lower without it): <q>the </q>"), "{html}");
        let plain = render_html("r", "m", &[doc("text", vec![])]);
        assert!(!plain.contains("attended to most") && !plain.contains("lost most without"));
    }

    #[test]
    fn an_ensembles_members_are_listed_under_the_scores() {
        let member = |model: &str, label: &str, probability| MemberView {
            model: model.into(),
            weight: 0.5,
            label: label.into(),
            probability,
        };
        let members = vec![member("members/1-<hier>", "b", 0.9), member("members/2-bow", "a", 0.6)];
        let html = render_html("r", "m", &[DocumentView { members, ..doc("text", vec![]) }]);
        assert!(
            html.contains("members/1-&lt;hier&gt; (weight 0.50): b (90.0%); members/2-bow (weight 0.50): a (60.0%)")
        );
        assert!(!render_html("r", "m", &[doc("text", vec![])]).contains("Ensemble of"));
    }

    #[test]
    fn page_is_self_contained_and_escapes_text() {
        let html = render_html(
            "Report",
            "m",
            &[doc("<b>x</b> & y", vec![ChunkView { index: 0, start: 0, end: 12, attention: 1.0, occlusion: None }])],
        );
        assert!(html.contains("&lt;b&gt;x&lt;/b&gt; &amp; y"));
        assert!(html.contains("d&lt;1&gt;"));
        assert!(!html.contains("<script") && !html.contains("src=") && !html.contains("href="));
        assert!(html.contains("Predicted: <span class=\"label\">b</span> (75.0%)"));
    }

    #[test]
    fn overlapping_chunks_take_the_larger_attention_and_unicode_offsets_are_chars() {
        let chunks = vec![
            ChunkView { index: 0, start: 0, end: 4, attention: 0.2, occlusion: None },
            ChunkView { index: 1, start: 2, end: 6, attention: 0.8, occlusion: None },
        ];
        let mut html = String::new();
        shaded_text(&mut html, "ünï🙂de", &chunks);
        // pieces: "ün" (chunk 0 only), "ï🙂" (both: 0.8 wins), "de" (chunk 1)
        assert!(html.contains("title=\"chunk #0 (0.200)\">ün</span>"), "{html}");
        assert!(html.contains("rgba(255,140,0,0.700)\" title=\"chunk #0 (0.200), #1 (0.800)\">ï🙂</span>"), "{html}");
        assert!(html.contains(">de</span>"));
    }

    #[test]
    fn occlusion_gets_a_chart_of_bars_up_and_down_only_when_chunks_have_it() {
        let chunks = vec![
            ChunkView { index: 0, start: 0, end: 4, attention: 0.2, occlusion: Some(-0.1) },
            ChunkView { index: 1, start: 2, end: 6, attention: 0.8, occlusion: Some(0.3) },
        ];
        let html = render_html("Report", "m", &[doc("ünï🙂de", chunks.clone())]);
        assert!(html.contains("occlusion per chunk") && html.contains("largest 0.3000"), "{html}");
        // The supporting chunk rises from the middle line in green, the other falls in red.
        assert!(html.contains("fill=\"#2b8a3e\"><title>chunk #1 chars 2–6: +0.3000</title>"), "{html}");
        assert!(html.contains("fill=\"#c92a2a\"><title>chunk #0 chars 0–4: -0.1000</title>"), "{html}");
        let without: Vec<ChunkView> = chunks.into_iter().map(|c| ChunkView { occlusion: None, ..c }).collect();
        assert!(!render_html("Report", "m", &[doc("ünï🙂de", without)]).contains("occlusion per chunk"));
    }

    #[test]
    fn han_documents_mark_sentences_and_shade_words() {
        let text = "Ünï good. Bad <x> day!";
        let sentences = vec![
            SentenceView {
                start: 0,
                end: 9,
                attention: 0.8,
                words: vec![
                    WordView { start: 0, end: 3, attention: 0.25 },
                    WordView { start: 4, end: 8, attention: 0.75 },
                ],
            },
            SentenceView {
                start: 10,
                end: 22,
                attention: 0.2,
                words: vec![
                    WordView { start: 10, end: 13, attention: 0.5 },
                    WordView { start: 18, end: 21, attention: 0.5 },
                ],
            },
        ];
        let mut html = String::new();
        sentence_text(&mut html, text, &sentences);
        // The strongest sentence has the darkest bar; its strongest word the darkest blue.
        assert!(html.contains("border-color:rgba(220,40,40,0.900)\" title=\"sentence #0: attention 0.800\""), "{html}");
        assert!(html.contains("rgba(60,110,230,0.700)\" title=\"word attention 0.750\">good</span>"), "{html}");
        assert!(html.contains(">Ünï</span>"), "character offsets, not bytes: {html}");
        // Text between words is kept and escaped.
        assert!(html.contains("</span> &lt;x&gt; <span"), "{html}");
        assert!(html.contains(">day</span>!</span>"), "{html}");
        let page = render_html("r", "m", &[DocumentView { sentences, ..doc(text, vec![]) }]);
        assert!(page.contains("attention per sentence"), "the chart shows sentences");
    }

    #[test]
    fn failed_documents_show_their_error() {
        let mut d = doc("", vec![]);
        d.error = Some("empty".into());
        assert!(render_html("r", "m", &[d]).contains("Not classified: empty"));
    }
}
