//! A board as a self-contained SVG picture: yellow and black flat-topped hexagons, tile numbers, and each clue
//! drawn just outside the end of its row. No scripts, fonts or links, so it opens in any browser.

use std::fmt::Write;

use super::geometry::Geometry;

/// Hexagon radius (centre to corner) in SVG units.
const R: f64 = 24.0;
const YELLOW: &str = "#f6c915";
const BLACK: &str = "#202020";

fn centre(q: i32, r: i32) -> (f64, f64) {
    let h = 3f64.sqrt() / 2.0 * R;
    (1.5 * R * f64::from(q), h * f64::from(2 * r + q))
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The picture of `board` (true = yellow) with its clues; `title` goes above it.
pub fn board_svg(geo: &Geometry, clues: &[u32], board: &[bool], title: &str) -> String {
    let extent = 1.5 * R * (geo.side as f64 - 1.0) + 3.0 * R;
    let top = 3f64.sqrt() * R * (geo.side as f64 - 1.0) + 3.0 * R;
    let (w, h) = (2.0 * extent, 2.0 * top + R);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="{:.1} {:.1} {w:.1} {h:.1}" width="{w:.0}" height="{h:.0}" font-family="sans-serif">"#,
        -extent,
        -top - R,
    );
    let _ = writeln!(s, "<title>{}</title>", escape(title));
    let _ = writeln!(
        s,
        r##"<rect x="{:.1}" y="{:.1}" width="{w:.1}" height="{h:.1}" fill="#f4f1ea"/>"##,
        -extent,
        -top - R
    );
    let _ = writeln!(
        s,
        r##"<text x="0" y="{:.1}" text-anchor="middle" font-size="{:.1}" fill="#333">{}</text>"##,
        -top - R / 4.0,
        R * 0.6,
        escape(title)
    );
    for (t, &(q, r)) in geo.coords.iter().enumerate() {
        let (cx, cy) = centre(q, r);
        let points: Vec<String> = (0..6)
            .map(|k| {
                let a = std::f64::consts::PI / 3.0 * f64::from(k);
                format!(
                    "{:.2},{:.2}",
                    cx + 0.96 * R * a.cos(),
                    cy + 0.96 * R * a.sin()
                )
            })
            .collect();
        let yellow = board.get(t).copied().unwrap_or(false);
        let (fill, ink) = if yellow {
            (YELLOW, "#6b5600")
        } else {
            (BLACK, "#9a9a9a")
        };
        let _ = writeln!(
            s,
            r##"<polygon points="{}" fill="{fill}" stroke="#888" stroke-width="1.5"/>"##,
            points.join(" ")
        );
        let _ = writeln!(
            s,
            r#"<text x="{cx:.2}" y="{:.2}" text-anchor="middle" font-size="{:.1}" fill="{ink}">{}</text>"#,
            cy + R * 0.18,
            R * 0.5,
            t + 1
        );
    }
    for (l, line) in geo.lines.iter().enumerate() {
        let (tile, (dq, dr)) = line.clue_anchor;
        let (q, r) = geo.coords[tile as usize];
        let (cx, cy) = centre(q + dq, r + dr);
        let clue = clues.get(l).copied().unwrap_or(0);
        let _ = writeln!(
            s,
            r##"<circle cx="{cx:.2}" cy="{cy:.2}" r="{:.1}" fill="#fff" stroke="#555"/><text x="{cx:.2}" y="{:.2}" text-anchor="middle" font-size="{:.1}" font-weight="bold" fill="#111">{clue}</text>"##,
            R * 0.55,
            cy + R * 0.25,
            R * 0.7
        );
    }
    s.push_str("</svg>\n");
    s
}
