//! The attention bar chart as inline SVG (one bar per chunk or sentence, the highest in a darker
//! colour), and the occlusion chart (one bar per chunk above or below a middle line).

use std::fmt::Write;

use crate::ChunkView;

const WIDTH: f32 = 720.0;
const HEIGHT: f32 = 160.0;
const MARGIN: f32 = 30.0;

/// An SVG bar chart of the attention of the chunks (or sentences: `unit`).
pub fn attention_chart(chunks: &[ChunkView], unit: &str) -> String {
    if chunks.is_empty() {
        return String::new();
    }
    let top = chunks.iter().map(|c| c.attention).fold(0.0f32, f32::max).max(f32::MIN_POSITIVE);
    let slot = (WIDTH - 2.0 * MARGIN) / chunks.len() as f32;
    let plot = HEIGHT - 2.0 * MARGIN;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" role=\"img\" \
         aria-label=\"attention per {unit}\"><text x=\"{MARGIN}\" y=\"16\" font-size=\"12\">attention per {unit} \
         (max {top:.3})</text><line x1=\"{MARGIN}\" y1=\"{y0}\" x2=\"{x1}\" y2=\"{y0}\" stroke=\"#888\"/>",
        y0 = HEIGHT - MARGIN,
        x1 = WIDTH - MARGIN
    );
    for (i, c) in chunks.iter().enumerate() {
        let h = plot * (c.attention / top).clamp(0.0, 1.0);
        let x = MARGIN + i as f32 * slot;
        let colour = if c.attention >= top { "#d9480f" } else { "#f59f00" };
        let _ = write!(
            svg,
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{colour}\">\
             <title>{unit} #{} chars {}–{}: {:.4}</title></rect>",
            HEIGHT - MARGIN - h,
            (slot * 0.8).max(1.0),
            c.index,
            c.start,
            c.end,
            c.attention
        );
        if chunks.len() <= 40 {
            let _ = write!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"middle\">{}</text>",
                x + slot * 0.4,
                HEIGHT - MARGIN + 12.0,
                c.index
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

/// An SVG bar chart of the chunks' occlusion (the label's probability lost without each
/// chunk): bars up (green) for chunks that support the label, down (red) for chunks that speak
/// against it, scaled to the largest magnitude. Empty when no chunk has an occlusion.
pub fn occlusion_chart(chunks: &[ChunkView]) -> String {
    let values: Vec<f32> = chunks.iter().filter_map(|c| c.occlusion).collect();
    if values.is_empty() {
        return String::new();
    }
    let top = values.iter().map(|v| v.abs()).fold(0.0f32, f32::max).max(f32::MIN_POSITIVE);
    let slot = (WIDTH - 2.0 * MARGIN) / chunks.len() as f32;
    let half = (HEIGHT - 2.0 * MARGIN) / 2.0;
    let middle = MARGIN + half;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" role=\"img\" \
         aria-label=\"occlusion per chunk\"><text x=\"{MARGIN}\" y=\"16\" font-size=\"12\">occlusion per chunk: \
         the label's probability lost without it (up: supports the label, down: against it; largest {top:.4})</text>\
         <line x1=\"{MARGIN}\" y1=\"{middle}\" x2=\"{x1}\" y2=\"{middle}\" stroke=\"#888\"/>",
        x1 = WIDTH - MARGIN
    );
    for (i, c) in chunks.iter().enumerate() {
        let Some(value) = c.occlusion else { continue };
        let h = half * (value.abs() / top).clamp(0.0, 1.0);
        let (y, colour) = if value >= 0.0 { (middle - h, "#2b8a3e") } else { (middle, "#c92a2a") };
        let _ = write!(
            svg,
            "<rect x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{colour}\">\
             <title>chunk #{} chars {}–{}: {value:+.4}</title></rect>",
            MARGIN + i as f32 * slot,
            (slot * 0.8).max(1.0),
            c.index,
            c.start,
            c.end,
        );
    }
    svg.push_str("</svg>");
    svg
}
