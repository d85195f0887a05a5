//! The shape of an n-pointed star: its lines, its 2n symmetries, the original program's field numbering, and the
//! canonical forms built from them. Everything here is fixed by n alone, so the kernels, the checks and the
//! rendering share one [`Geometry`] and none of them re-derives it.

/// The original program's six lines of the 6-pointed star, in its field numbering: what the field numbering
/// of [`Geometry::new`] must reproduce for n = 6, and what the bench's re-implementation of that program tests.
pub const ORIGINAL_LINES_SIX: [[usize; 4]; 6] = [
    [0, 1, 2, 3],
    [3, 4, 5, 6],
    [6, 7, 8, 0],
    [9, 2, 4, 10],
    [10, 5, 7, 11],
    [11, 8, 1, 9],
];

/// The static shape of an n-pointed star.
#[derive(Debug, Clone)]
pub struct Geometry {
    pub n: usize,
    pub magic: u32,
    /// `lines[i]` = cells of line i in order.
    pub lines: Vec<[u8; 4]>,
    /// The 2n symmetries as cell maps: symmetry `g` moves cell `c` to `g[c]`.
    pub symmetries: Vec<Vec<u8>>,
    /// Their inverses: under symmetry `g`, cell `d` receives the label of cell `sources[g][d]`.
    sources: Vec<Vec<u8>>,
    /// The same in field order: field `f`'s image under `g` is the label of cell `field_sources[g][f]`.
    field_sources: Vec<Vec<u8>>,
    /// The symmetries other than the identity that leave O_0 in place (one reflection).
    fixing_o0: Vec<usize>,
    /// The original program's field numbering, generalised to any n: `fields[f]` is the cell of field f.
    pub fields: Vec<u8>,
}

impl Geometry {
    pub fn new(n: usize) -> Geometry {
        let o = |i: usize| (i % n) as u8;
        let j = |i: usize| (n + i % n) as u8;
        let lines: Vec<[u8; 4]> = (0..n).map(|i| [o(i), j(i), j(i + 1), o(i + 2)]).collect();
        let mut symmetries: Vec<Vec<u8>> = Vec::with_capacity(2 * n);
        for k in 0..n {
            // Rotation by k: O_i -> O_{i+k}, J_i -> J_{i+k}.
            symmetries.push(
                (0..2 * n)
                    .map(|c| if c < n { o(c + k) } else { j(c - n + k) })
                    .collect(),
            );
        }
        for k in 0..n {
            // Reflection O_i -> O_{-i} (maps line i to line -i-2, hence J_i -> J_{-i-1}), then rotation by k.
            symmetries.push(
                (0..2 * n)
                    .map(|c| {
                        if c < n {
                            o(n - c + k)
                        } else {
                            j(2 * n - (c - n) - 1 + k)
                        }
                    })
                    .collect(),
            );
        }
        // The original program labels one triangle's edge, fills it all around, then the second triangle. For
        // any n: walk lines 0, 2, 4, ... until the walk closes, then from the first unvisited line, listing each
        // cell the first time a line reaches it.
        let mut fields = Vec::with_capacity(2 * n);
        let mut line_seen = vec![false; n];
        let mut cell_seen = vec![false; 2 * n];
        for start in 0..n {
            let mut i = start;
            while !line_seen[i] {
                line_seen[i] = true;
                for &c in &lines[i] {
                    if !cell_seen[c as usize] {
                        cell_seen[c as usize] = true;
                        fields.push(c);
                    }
                }
                i = (i + 2) % n;
            }
        }
        let sources: Vec<Vec<u8>> = symmetries
            .iter()
            .map(|g| {
                let mut inv = vec![0; 2 * n];
                for (c, &d) in g.iter().enumerate() {
                    inv[d as usize] = c as u8;
                }
                inv
            })
            .collect();
        let field_sources = sources
            .iter()
            .map(|src| fields.iter().map(|&c| src[c as usize]).collect())
            .collect();
        let fixing_o0 = (1..sources.len()).filter(|&g| sources[g][0] == 0).collect();
        Geometry {
            n,
            magic: 4 * n as u32 + 2,
            lines,
            symmetries,
            sources,
            field_sources,
            fixing_o0,
            fields,
        }
    }

    /// Does `labels` (by cell) satisfy every line? Assumes labels are a permutation of 1..2n.
    pub fn all_lines_hold(&self, labels: &[u8]) -> bool {
        self.lines.iter().all(|l| {
            l.iter()
                .map(|&c| u32::from(labels[c as usize]))
                .sum::<u32>()
                == self.magic
        })
    }

    /// The image of a labelling under symmetry `g`.
    pub(crate) fn image(&self, labels: &[u8], g: &[u8], out: &mut [u8]) {
        for (c, &l) in labels.iter().enumerate() {
            out[g[c] as usize] = l;
        }
    }

    /// The lexicographically smallest image (cells in order: outer then inner).
    pub fn canonical(&self, labels: &[u8]) -> Vec<u8> {
        let mut best = labels.to_vec();
        let mut img = vec![0; labels.len()];
        for g in &self.symmetries {
            self.image(labels, g, &mut img);
            if img < best {
                best.copy_from_slice(&img);
            }
        }
        best
    }

    /// Whether `labels` (distinct, as a star's are) is its own [`Geometry::canonical`] form, without building
    /// any image. The first cell of an image is the label of the outer cell the symmetry moves to O_0, and
    /// labels are distinct, so every symmetry that moves O_0 elsewhere gives a smaller image exactly when that
    /// cell's label is below O_0's: O_0 must hold the smallest outer label. Only the reflection that leaves O_0
    /// in place is then compared cell by cell. The coordinator checks every listed star (n = 12: 400,000), so
    /// this must cost far less than the search that found it.
    pub fn is_canonical(&self, labels: &[u8]) -> bool {
        let Some((&first, outer)) = labels[..self.n].split_first() else {
            return true;
        };
        if outer.iter().any(|&l| l < first) {
            return false;
        }
        self.fixing_o0.iter().all(|&g| {
            for (d, &c) in self.sources[g].iter().enumerate() {
                let (image, own) = (labels[c as usize], labels[d]);
                if image != own {
                    return image > own;
                }
            }
            true
        })
    }

    /// A star as the original program lists it: the smallest image written in field order.
    pub fn field_form(&self, labels: &[u8]) -> Vec<u8> {
        // Like `is_canonical`, images are compared where they are read and left at the first difference, never
        // built: an answer shows up to 10,000 stars, each with 2n images of 2n cells.
        let image = |g: usize, k: usize| labels[self.field_sources[g][k] as usize];
        let fields = self.fields.len();
        let mut best = 0;
        for g in 1..self.field_sources.len() {
            if let Some(k) = (0..fields).find(|&k| image(g, k) != image(best, k)) {
                if image(g, k) < image(best, k) {
                    best = g;
                }
            }
        }
        (0..fields).map(|k| image(best, k)).collect()
    }
}
