//! `curves.png`: training loss and dev loss (left), dev accuracy and macro-F1 (right) per
//! epoch, drawn into a small RGB raster and encoded as PNG (no plotting or font library).

use crate::font::{draw_text, text_width};
use crate::raster::{Canvas, Rgb};

/// What one epoch contributes to the curves (NaN values are left out).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpochPoint {
    /// 1-based epoch.
    pub epoch: usize,
    /// Mean training loss.
    pub train_loss: f64,
    /// Dev loss.
    pub dev_loss: f64,
    /// Dev accuracy.
    pub dev_accuracy: f64,
    /// Dev macro-F1.
    pub dev_macro_f1: f64,
}

/// Width and height of the image.
pub const SIZE: (usize, usize) = (960, 380);
/// Colours of the four series: train loss, dev loss, accuracy, macro-F1.
pub const COLOURS: [Rgb; 4] = [[31, 119, 180], [255, 127, 14], [44, 160, 44], [214, 39, 40]];

/// The curves as PNG bytes.
pub fn training_curves_png(points: &[EpochPoint]) -> Vec<u8> {
    let mut canvas = Canvas::new(SIZE.0, SIZE.1, [255, 255, 255]);
    let epochs: Vec<f64> = points.iter().map(|p| p.epoch as f64).collect();
    let half = SIZE.0 / 2;
    let loss = [
        ("train loss", points.iter().map(|p| p.train_loss).collect::<Vec<_>>(), COLOURS[0]),
        ("dev loss", points.iter().map(|p| p.dev_loss).collect(), COLOURS[1]),
    ];
    let finite_max = loss.iter().flat_map(|(_, v, _)| v.iter().copied()).filter(|v| v.is_finite()).fold(0.0, f64::max);
    let top = nice_ceiling(finite_max);
    panel(&mut canvas, 0, half, "loss", &epochs, &loss, (0.0, top));
    let metrics = [
        ("dev accuracy", points.iter().map(|p| p.dev_accuracy).collect::<Vec<_>>(), COLOURS[2]),
        ("dev macro-f1", points.iter().map(|p| p.dev_macro_f1).collect(), COLOURS[3]),
    ];
    panel(&mut canvas, half, half, "dev metrics", &epochs, &metrics, (0.0, 1.0));
    canvas.to_png()
}

/// A round number at or above `v` (1, 2 or 5 times a power of ten).
fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * magnitude).find(|&c| c >= v).unwrap_or(10.0 * magnitude)
}

/// One chart in the horizontal band `x0..x0 + width`.
fn panel(
    canvas: &mut Canvas,
    x0: usize,
    width: usize,
    title: &str,
    epochs: &[f64],
    series: &[(&str, Vec<f64>, Rgb)],
    (y_min, y_max): (f64, f64),
) {
    let (left, right, top, bottom) = (x0 + 60, x0 + width - 20, 40, SIZE.1 - 50);
    let grey = [200, 200, 200];
    let black = [0, 0, 0];
    draw_text(canvas, x0 + width / 2 - text_width(title, 2) / 2, 10, title, 2, black);
    let (e_min, e_max) = (1.0, epochs.iter().copied().fold(1.0, f64::max).max(2.0));
    let px = |e: f64| left as f64 + (e - e_min) / (e_max - e_min) * (right - left) as f64;
    let py = |v: f64| bottom as f64 - (v - y_min) / (y_max - y_min) * (bottom - top) as f64;
    // Grid, ticks and labels.
    for i in 0..=4 {
        let v = y_min + (y_max - y_min) * i as f64 / 4.0;
        let y = py(v).round() as usize;
        canvas.line((left as f64, y as f64), (right as f64, y as f64), grey, 1);
        let label = format_tick(v);
        draw_text(canvas, left.saturating_sub(8 + text_width(&label, 1)), y.saturating_sub(3), &label, 1, black);
    }
    let step = ((e_max - e_min) / 10.0).ceil().max(1.0) as usize;
    for e in (1..=e_max as usize).step_by(step) {
        let x = px(e as f64).round() as usize;
        canvas.line((x as f64, bottom as f64), (x as f64, bottom as f64 + 4.0), black, 1);
        let label = e.to_string();
        draw_text(canvas, x.saturating_sub(text_width(&label, 1) / 2), bottom + 8, &label, 1, black);
    }
    draw_text(canvas, (left + right) / 2 - text_width("epoch", 1) / 2, bottom + 22, "epoch", 1, black);
    canvas.line((left as f64, top as f64), (left as f64, bottom as f64), black, 1);
    canvas.line((left as f64, bottom as f64), (right as f64, bottom as f64), black, 1);
    // Series and legend.
    for (k, (name, values, colour)) in series.iter().enumerate() {
        let points: Vec<(f64, f64)> = epochs
            .iter()
            .zip(values)
            .filter(|(_, v)| v.is_finite())
            .map(|(&e, &v)| (px(e), py(v.clamp(y_min, y_max))))
            .collect();
        for pair in points.windows(2) {
            canvas.line(pair[0], pair[1], *colour, 2);
        }
        for &(x, y) in &points {
            canvas.square(x, y, 3, *colour);
        }
        let (lx, ly) = (left + 12, top + 8 + 14 * k);
        canvas.line((lx as f64, ly as f64 + 3.0), (lx as f64 + 18.0, ly as f64 + 3.0), *colour, 2);
        draw_text(canvas, lx + 24, ly, name, 1, black);
    }
}

fn format_tick(v: f64) -> String {
    if v == v.round() && v.abs() >= 1.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8]) -> (usize, usize, Vec<u8>) {
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        (info.width as usize, info.height as usize, buf[..info.buffer_size()].to_vec())
    }

    fn count(pixels: &[u8], colour: Rgb) -> usize {
        pixels.chunks_exact(3).filter(|p| *p == colour).count()
    }

    fn point(epoch: usize, loss: f64) -> EpochPoint {
        EpochPoint { epoch, train_loss: loss, dev_loss: loss * 1.1, dev_accuracy: 0.5, dev_macro_f1: 0.4 }
    }

    #[test]
    fn draws_every_series_into_a_valid_png() {
        let points: Vec<EpochPoint> = (1..=5).map(|e| point(e, 1.0 / e as f64)).collect();
        let (w, h, pixels) = decode(&training_curves_png(&points));
        assert_eq!((w, h), SIZE);
        for colour in COLOURS {
            assert!(count(&pixels, colour) > 100, "{colour:?} is drawn");
        }
    }

    #[test]
    fn a_single_epoch_and_nan_values_still_render() {
        let mut p = point(1, f64::NAN);
        p.dev_loss = f64::INFINITY;
        let (w, h, pixels) = decode(&training_curves_png(&[p]));
        assert_eq!((w, h), SIZE);
        assert!(count(&pixels, COLOURS[2]) > 0, "the finite series is drawn");
        let (_, _, empty) = decode(&training_curves_png(&[]));
        assert!(count(&empty, COLOURS[0]) > 0, "legend only");
    }

    #[test]
    fn nice_ceilings() {
        assert_eq!(nice_ceiling(0.69), 1.0);
        assert_eq!(nice_ceiling(1.3), 2.0);
        assert_eq!(nice_ceiling(3.0), 5.0);
        assert_eq!(nice_ceiling(0.0), 1.0);
    }
}
