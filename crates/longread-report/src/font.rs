//! A 5×7 bitmap font for chart labels: digits, lower-case letters and a few signs
//! (upper case is drawn as lower case).

use crate::raster::{Canvas, Rgb};

/// Rows of each glyph, top first; `#` marks a pixel.
const GLYPHS: &[(char, [&str; 7])] = &[
    ('0', [" ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### "]),
    ('1', ["  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "]),
    ('2', [" ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####"]),
    ('3', ["#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### "]),
    ('4', ["   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # "]),
    ('5', ["#####", "#    ", "#### ", "    #", "    #", "#   #", " ### "]),
    ('6', ["  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### "]),
    ('7', ["#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   "]),
    ('8', [" ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### "]),
    ('9', [" ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  "]),
    ('.', ["     ", "     ", "     ", "     ", "     ", " ##  ", " ##  "]),
    ('-', ["     ", "     ", "     ", " ### ", "     ", "     ", "     "]),
    (':', ["     ", " ##  ", " ##  ", "     ", " ##  ", " ##  ", "     "]),
    ('(', ["   # ", "  #  ", " #   ", " #   ", " #   ", "  #  ", "   # "]),
    (')', [" #   ", "  #  ", "   # ", "   # ", "   # ", "  #  ", " #   "]),
    ('a', ["     ", "     ", " ### ", "    #", " ####", "#   #", " ####"]),
    ('b', ["#    ", "#    ", "# ## ", "##  #", "#   #", "#   #", "#### "]),
    ('c', ["     ", "     ", " ### ", "#    ", "#    ", "#   #", " ### "]),
    ('d', ["    #", "    #", " ## #", "#  ##", "#   #", "#   #", " ####"]),
    ('e', ["     ", "     ", " ### ", "#   #", "#####", "#    ", " ### "]),
    ('f', ["  ## ", " #  #", " #   ", "###  ", " #   ", " #   ", " #   "]),
    ('g', ["     ", " ####", "#   #", "#   #", " ####", "    #", " ### "]),
    ('h', ["#    ", "#    ", "# ## ", "##  #", "#   #", "#   #", "#   #"]),
    ('i', ["  #  ", "     ", " ##  ", "  #  ", "  #  ", "  #  ", " ### "]),
    ('j', ["   # ", "     ", "  ## ", "   # ", "   # ", "#  # ", " ##  "]),
    ('k', ["#    ", "#    ", "#  # ", "# #  ", "##   ", "# #  ", "#  # "]),
    ('l', [" ##  ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "]),
    ('m', ["     ", "     ", "## # ", "# # #", "# # #", "#   #", "#   #"]),
    ('n', ["     ", "     ", "# ## ", "##  #", "#   #", "#   #", "#   #"]),
    ('o', ["     ", "     ", " ### ", "#   #", "#   #", "#   #", " ### "]),
    ('p', ["     ", "     ", "#### ", "#   #", "#### ", "#    ", "#    "]),
    ('q', ["     ", "     ", " ## #", "#  ##", " ####", "    #", "    #"]),
    ('r', ["     ", "     ", "# ## ", "##  #", "#    ", "#    ", "#    "]),
    ('s', ["     ", "     ", " ### ", "#    ", " ### ", "    #", "#### "]),
    ('t', [" #   ", " #   ", "###  ", " #   ", " #   ", " #  #", "  ## "]),
    ('u', ["     ", "     ", "#   #", "#   #", "#   #", "#  ##", " ## #"]),
    ('v', ["     ", "     ", "#   #", "#   #", "#   #", " # # ", "  #  "]),
    ('w', ["     ", "     ", "#   #", "#   #", "# # #", "# # #", " # # "]),
    ('x', ["     ", "     ", "#   #", " # # ", "  #  ", " # # ", "#   #"]),
    ('y', ["     ", "     ", "#   #", "#   #", " ####", "    #", " ### "]),
    ('z', ["     ", "     ", "#####", "   # ", "  #  ", " #   ", "#####"]),
];

/// Horizontal advance of one character at scale 1 (glyph plus one column of space).
const ADVANCE: usize = 6;

/// Width in pixels of `text` at `scale`.
pub fn text_width(text: &str, scale: usize) -> usize {
    text.chars().count() * ADVANCE * scale
}

/// Draws `text` with its top-left corner at `(x, y)`; unknown characters are left blank.
pub fn draw_text(canvas: &mut Canvas, x: usize, y: usize, text: &str, scale: usize, colour: Rgb) {
    for (i, c) in text.chars().enumerate() {
        let c = c.to_ascii_lowercase();
        let Some((_, rows)) = GLYPHS.iter().find(|(g, _)| *g == c) else { continue };
        let left = x + i * ADVANCE * scale;
        for (r, row) in rows.iter().enumerate() {
            for (col, cell) in row.chars().enumerate() {
                if cell == '#' {
                    for dy in 0..scale {
                        for dx in 0..scale {
                            canvas.set((left + col * scale + dx) as i64, (y + r * scale + dy) as i64, colour);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_glyph_is_five_by_seven_and_unique() {
        for (c, rows) in GLYPHS {
            assert!(rows.iter().all(|r| r.chars().count() == 5), "{c}");
        }
        for (i, (a, ra)) in GLYPHS.iter().enumerate() {
            for (b, rb) in &GLYPHS[i + 1..] {
                assert!(a != b && ra != rb, "{a} and {b}");
            }
        }
    }
}
