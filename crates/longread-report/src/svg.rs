//! The attention bar chart as inline SVG (one bar per chunk or sentence, the highest in a darker
//! colour).

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
