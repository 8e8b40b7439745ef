//! A minimal RGB raster: pixels, thick lines, squares, PNG encoding.

/// An RGB colour.
pub type Rgb = [u8; 3];

/// An RGB image in memory.
pub struct Canvas {
    width: usize,
    height: usize,
    pixels: Vec<u8>,
}

impl Canvas {
    /// A canvas filled with `background`.
    pub fn new(width: usize, height: usize, background: Rgb) -> Self {
        Self { width, height, pixels: background.repeat(width * height) }
    }

    /// Sets one pixel; outside the canvas nothing happens.
    pub fn set(&mut self, x: i64, y: i64, colour: Rgb) {
        if x >= 0 && y >= 0 && (x as usize) < self.width && (y as usize) < self.height {
            let i = 3 * (y as usize * self.width + x as usize);
            self.pixels[i..i + 3].copy_from_slice(&colour);
        }
    }

    /// A filled square of side `2·half + 1` centred on `(x, y)`.
    pub fn square(&mut self, x: f64, y: f64, half: i64, colour: Rgb) {
        let (cx, cy) = (x.round() as i64, y.round() as i64);
        for dy in -half..=half {
            for dx in -half..=half {
                self.set(cx + dx, cy + dy, colour);
            }
        }
    }

    /// A line `thickness` pixels wide (sampled every half pixel along its length).
    pub fn line(&mut self, from: (f64, f64), to: (f64, f64), colour: Rgb, thickness: i64) {
        let steps = ((to.0 - from.0).abs().max((to.1 - from.1).abs()) * 2.0).ceil().max(1.0) as usize;
        let (lo, hi) = (-(thickness - 1) / 2, thickness / 2);
        for s in 0..=steps {
            let t = s as f64 / steps as f64;
            let (x, y) = (from.0 + (to.0 - from.0) * t, from.1 + (to.1 - from.1) * t);
            for d in lo..=hi {
                for e in lo..=hi {
                    self.set(x.round() as i64 + d, y.round() as i64 + e, colour);
                }
            }
        }
    }

    /// PNG bytes (8-bit RGB).
    pub fn to_png(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, self.width as u32, self.height as u32);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        // Writing into a Vec cannot fail short of running out of memory.
        let mut writer = encoder.write_header().expect("PNG header into memory");
        writer.write_image_data(&self.pixels).expect("PNG data into memory");
        writer.finish().expect("PNG end into memory");
        out
    }
}
