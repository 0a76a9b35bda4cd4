//! How much room a line of text takes, without a font engine: the advance widths of DejaVu
//! Sans, the font the plots name first and the one librsvg falls back to for `sans-serif` on
//! Debian. Arial and Helvetica, a browser's usual `sans-serif`, are narrower at every printable
//! ASCII character, so a box sized by these widths holds the text in either.

/// Advance widths of DejaVu Sans 2.37 (Book), in 1/2048 em, for the characters ' ' to '~'
/// (read from `DejaVuSans.ttf`'s `hmtx` table through its `cmap`).
const BOOK: [u16; 95] = [
    651, 821, 942, 1716, 1303, 1946, 1597, 563, 799, 799, 1024, 1716, 651, 739, 651, 690, 1303,
    1303, 1303, 1303, 1303, 1303, 1303, 1303, 1303, 1303, 690, 690, 1716, 1716, 1716, 1087, 2048,
    1401, 1405, 1430, 1577, 1294, 1178, 1587, 1540, 604, 604, 1343, 1141, 1767, 1532, 1612, 1235,
    1612, 1423, 1300, 1251, 1499, 1401, 2025, 1403, 1251, 1403, 799, 690, 799, 1716, 1024, 1024,
    1255, 1300, 1126, 1300, 1260, 721, 1300, 1298, 569, 569, 1186, 569, 1995, 1298, 1253, 1300,
    1300, 842, 1067, 803, 1298, 1212, 1675, 1212, 1212, 1075, 1303, 690, 1303, 1716,
];

/// The same for DejaVu Sans Bold (`DejaVuSans-Bold.ttf`).
const BOLD: [u16; 95] = [
    713, 934, 1067, 1716, 1425, 2052, 1786, 627, 936, 936, 1071, 1716, 778, 850, 778, 748, 1425,
    1425, 1425, 1425, 1425, 1425, 1425, 1425, 1425, 1425, 819, 819, 1716, 1716, 1716, 1188, 2048,
    1585, 1561, 1503, 1700, 1399, 1399, 1681, 1714, 762, 762, 1587, 1305, 2038, 1714, 1741, 1501,
    1741, 1577, 1475, 1397, 1663, 1585, 2259, 1579, 1483, 1485, 936, 748, 936, 1716, 1024, 1024,
    1382, 1466, 1214, 1466, 1389, 891, 1466, 1458, 702, 702, 1362, 702, 2134, 1458, 1407, 1466,
    1466, 1010, 1219, 979, 1458, 1335, 1892, 1321, 1335, 1192, 1458, 748, 1458, 1716,
];

/// Characters outside ASCII that the plots write, with their (Book, Bold) widths.
const OTHERS: [(char, u16, u16); 8] = [
    ('µ', 1303, 1507),
    ('–', 1024, 1024),
    ('—', 2048, 2048),
    ('≥', 1716, 1716),
    ('≤', 1716, 1716),
    ('×', 1716, 1716),
    ('’', 651, 778),
    ('°', 1024, 1024),
];

/// Any other character is taken to be a whole em wide, wider than all but a few glyphs.
const UNKNOWN: u16 = 2048;

/// The font's ascent and descent, in 1/2048 em (`hhea`): a line's box above and below its
/// baseline.
pub(crate) const ASCENT_EM: f64 = 1901.0 / 2048.0;
pub(crate) const DESCENT_EM: f64 = 483.0 / 2048.0;

/// The width `text` takes at `size` px.
pub(crate) fn width(text: &str, size: f64, bold: bool) -> f64 {
    let units: u32 = text
        .chars()
        .map(|c| {
            let ascii = c as u32;
            if (32..127).contains(&ascii) {
                let table = if bold { &BOLD } else { &BOOK };
                return u32::from(table[ascii as usize - 32]);
            }
            OTHERS
                .iter()
                .find(|(known, _, _)| *known == c)
                .map_or(u32::from(UNKNOWN), |&(_, book, bold_width)| {
                    u32::from(if bold { bold_width } else { book })
                })
        })
        .sum();
    f64::from(units) / 2048.0 * size
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_add_up_per_character_and_bold_is_wider() {
        // "0" is 1303/2048 em: ten of them at 20.48 px are 130.3 px.
        assert!((width("0000000000", 20.48, false) - 130.3).abs() < 1e-9);
        assert!(width("reamer, defaults", 11.0, true) > width("reamer, defaults", 11.0, false));
        assert!((width("µs", 2048.0, false) - (1303.0 + 1067.0)).abs() < 1e-9);
        // Unknown characters are taken wide.
        assert_eq!(width("漢", 10.0, false), 10.0);
        assert_eq!(width("", 11.0, false), 0.0);
    }
}
