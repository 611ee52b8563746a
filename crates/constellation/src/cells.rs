//! The cellular geometry of §6.4.2/§6.6.1 and cell-address aggregation (§6.6.3).
//!
//! The Earth is cut into 128 latitude bands of 180/128° (the first and last are polar caps of
//! one cell). A band holds `4·k` cells, `k` the smallest integer such that cells are no wider
//! than those on the equator (256 around): about 156 km squares, 21,362 cells in all with our
//! rounding (the thesis reports 21,352; its exact rounding rule is not in the text). The cells
//! are mapped onto a 128 × 256 rectilinear grid (a band with fewer than 256 cells spreads its
//! redundant grid points evenly), and each grid coordinate is Gray-coded (7 + 8 bits; the
//! thesis numbers each dimension with 8 bits, 002:4622, and our 128 rows need only 7), so
//! neighbouring cells have addresses one bit apart and contiguous blocks of 2^m cells can be
//! one (address, mask) forwarding entry.

/// Latitude bands, polar caps included.
pub const ROWS: u32 = 128;
/// Grid columns (cells in the equatorial bands).
pub const COLUMNS: u32 = 256;
const ROW_BITS: u32 = 7;
const COL_BITS: u32 = 8;

/// The reflected binary Gray code of `i`.
pub fn gray(i: u32) -> u32 {
    i ^ (i >> 1)
}

/// Inverse of [`gray`].
pub fn gray_inverse(mut g: u32) -> u32 {
    let mut i = 0;
    while g != 0 {
        i ^= g;
        g >>= 1;
    }
    i
}

/// A cell: band (row, south to north) and index within the band (west to east from 180°W).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cell {
    pub row: u32,
    pub index: u32,
}

/// The cell structure.
#[derive(Debug, Clone)]
pub struct CellGrid {
    per_row: Vec<u32>,
    first: Vec<u32>,
}

impl Default for CellGrid {
    fn default() -> Self {
        Self::new()
    }
}

impl CellGrid {
    pub fn new() -> CellGrid {
        let h = 180.0 / ROWS as f64;
        let mut per_row = Vec::new();
        for r in 0..ROWS {
            let n = if r == 0 || r == ROWS - 1 {
                1
            } else {
                let lo = -90.0 + r as f64 * h;
                let base = lo.abs().min((lo + h).abs());
                let quarter = COLUMNS as f64 / 4.0;
                4 * ((quarter * base.to_radians().cos() - 1e-9).ceil() as u32).max(1)
            };
            per_row.push(n);
        }
        let mut first = Vec::new();
        let mut acc = 0;
        for &n in &per_row {
            first.push(acc);
            acc += n;
        }
        CellGrid { per_row, first }
    }

    /// Total number of cells.
    pub fn len(&self) -> usize {
        self.per_row.iter().sum::<u32>() as usize
    }
    pub fn is_empty(&self) -> bool {
        false
    }
    pub fn cells_in_row(&self, row: u32) -> u32 {
        self.per_row[row as usize]
    }
    /// A number 0..len() for the cell.
    pub fn id(&self, c: Cell) -> usize {
        (self.first[c.row as usize] + c.index) as usize
    }
    pub fn cell_of_id(&self, id: usize) -> Cell {
        let row = self.first.partition_point(|&f| f as usize <= id) - 1;
        Cell {
            row: row as u32,
            index: id as u32 - self.first[row],
        }
    }

    /// The cell containing latitude/longitude (degrees).
    pub fn cell_at(&self, lat_deg: f64, lon_deg: f64) -> Cell {
        let h = 180.0 / ROWS as f64;
        let row = (((lat_deg + 90.0) / h).floor() as i64).clamp(0, ROWS as i64 - 1) as u32;
        let n = self.per_row[row as usize];
        let x = (lon_deg + 180.0).rem_euclid(360.0) / 360.0;
        Cell {
            row,
            index: ((x * n as f64).floor() as u32).min(n - 1),
        }
    }

    /// Centre of a cell (degrees); the caps' centres are the poles.
    pub fn centre(&self, c: Cell) -> (f64, f64) {
        let h = 180.0 / ROWS as f64;
        if c.row == 0 {
            return (-90.0, 0.0);
        }
        if c.row == ROWS - 1 {
            return (90.0, 0.0);
        }
        let n = self.per_row[c.row as usize] as f64;
        (
            -90.0 + (c.row as f64 + 0.5) * h,
            -180.0 + (c.index as f64 + 0.5) * 360.0 / n,
        )
    }

    /// The cell a grid point maps onto.
    pub fn cell_of_grid(&self, row: u32, col: u32) -> Cell {
        let n = self.per_row[row as usize];
        Cell {
            row,
            index: col * n / COLUMNS,
        }
    }

    /// The cell's address: Gray-coded row (7 bits) then Gray-coded first grid column (8 bits).
    pub fn address(&self, c: Cell) -> u16 {
        let n = self.per_row[c.row as usize];
        let col = (c.index * COLUMNS).div_ceil(n);
        ((gray(c.row) << COL_BITS) | gray(col)) as u16
    }
}

/// Whether the `2^m` cells from `start` (cyclically, over `2^bits` cells numbered by the Gray
/// code) form one (address, mask) entry: their codes agree on all but `m` bits.
pub fn legal_block(bits: u32, start: u32, m: u32) -> bool {
    let n = 1u32 << bits;
    let (mut and, mut or) = (u32::MAX, 0u32);
    for i in 0..(1u32 << m) {
        let g = gray((start + i) % n);
        and &= g;
        or |= g;
    }
    ((or ^ and) & (n - 1)).count_ones() == m
}

/// A block of `2^m` cells from `start` (cyclic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block1 {
    pub start: u32,
    pub m: u32,
}

/// The thesis' greedy aggregation in one dimension (§6.6.3): from the largest block size down,
/// remove as many non-overlapping legal blocks of that size as fit in the remaining cells,
/// choosing in each contiguous run the better of the two legal alignments. `set[i]` says whether
/// cell `i` (of `2^bits`) is to be covered.
pub fn greedy_1d(bits: u32, set: &[bool]) -> Vec<Block1> {
    let n = 1usize << bits;
    assert_eq!(set.len(), n, "set must have 2^bits cells");
    let mut left: Vec<bool> = set.to_vec();
    let mut out = Vec::new();
    if left.iter().all(|&x| x) {
        return vec![Block1 { start: 0, m: bits }];
    }
    for m in (0..bits).rev() {
        let size = 1usize << m;
        // Runs of remaining cells, cyclic, starting after an uncovered cell.
        let Some(gap) = left.iter().position(|&x| !x) else {
            break;
        };
        let mut runs: Vec<(usize, usize)> = Vec::new(); // (start, len), start unwrapped
        let mut i = gap + 1;
        while i <= gap + n {
            if left[i % n] {
                let s = i;
                while i <= gap + n && left[i % n] {
                    i += 1;
                }
                runs.push((s, i - s));
            } else {
                i += 1;
            }
        }
        for (s, len) in runs {
            if len < size {
                continue;
            }
            let aligns: &[usize] = if m == 0 { &[0] } else { &[0, size / 2] };
            let mut best: Vec<usize> = Vec::new();
            for &a in aligns {
                let mut starts = Vec::new();
                let mut x = s + (a + n - s % size) % size;
                while x + size <= s + len {
                    if legal_block(bits, (x % n) as u32, m) {
                        starts.push(x);
                        x += size;
                    } else {
                        x += 1;
                    }
                }
                if starts.len() > best.len() {
                    best = starts;
                }
            }
            for x in best {
                for k in 0..size {
                    left[(x + k) % n] = false;
                }
                out.push(Block1 {
                    start: (x % n) as u32,
                    m,
                });
            }
        }
    }
    out
}

/// A rectangle of `2^a` rows by `2^b` columns on the grid (cyclic in both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block2 {
    pub row: u32,
    pub col: u32,
    pub a: u32,
    pub b: u32,
}

/// Greedy two-dimensional aggregation of the grid points whose label is `label` (the thesis'
/// approach: largest block sizes first; here first-fit within a size over both legal
/// alignments in each dimension, not a brute-force maximisation of each size's sub-problem).
/// `labels` is row-major, `ROWS × COLUMNS`.
pub fn greedy_2d(labels: &[u16], label: u16) -> Vec<Block2> {
    let (nr, nc) = (ROWS as usize, COLUMNS as usize);
    assert_eq!(labels.len(), nr * nc);
    let mut left: Vec<bool> = labels.iter().map(|&l| l == label).collect();
    let mut count = left.iter().filter(|&&x| x).count();
    let mut out = Vec::new();
    for k in (0..=ROW_BITS + COL_BITS).rev() {
        for a in 0..=ROW_BITS.min(k) {
            let b = k - a;
            if b > COL_BITS || count < (1 << k) {
                continue;
            }
            let (h, w) = (1usize << a, 1usize << b);
            let ra: &[usize] = if a == 0 || a == ROW_BITS {
                &[0]
            } else {
                &[0, h / 2]
            };
            let ca: &[usize] = if b == 0 || b == COL_BITS {
                &[0]
            } else {
                &[0, w / 2]
            };
            for &r0 in ra {
                for &c0 in ca {
                    let mut r = r0;
                    while r < nr {
                        let mut c = c0;
                        while c < nc {
                            let full = (0..h).all(|i| {
                                let row = (r + i) % nr;
                                (0..w).all(|j| left[row * nc + (c + j) % nc])
                            });
                            if full {
                                for i in 0..h {
                                    for j in 0..w {
                                        left[((r + i) % nr) * nc + (c + j) % nc] = false;
                                    }
                                }
                                count -= h * w;
                                out.push(Block2 {
                                    row: r as u32,
                                    col: c as u32,
                                    a,
                                    b,
                                });
                            }
                            c += w;
                        }
                        r += h;
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gray_code_neighbours_differ_in_one_bit_cyclically() {
        for bits in 1..=8 {
            let n = 1u32 << bits;
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let d = gray(i) ^ gray((i + 1) % n);
                assert_eq!(d.count_ones(), 1, "{i} of {n}");
                assert_eq!(gray_inverse(gray(i)), i);
                seen[gray(i) as usize] = true;
            }
            assert!(seen.iter().all(|&s| s), "one-to-one");
        }
    }

    #[test]
    fn only_two_alignments_are_legal_at_each_mask_level() {
        // Lemma 6.1: blocks of 2^m contiguous cells aggregate only on boundaries ≡ 0 or 2^(m-1)
        // (mod 2^m); at levels 0 and n there is one partition.
        let bits = 6;
        let n = 1u32 << bits;
        for m in 1..bits {
            let size = 1u32 << m;
            for s in 0..n {
                let aligned = s % size == 0 || s % size == size / 2;
                assert_eq!(legal_block(bits, s, m), aligned, "m {m} start {s}");
            }
        }
        assert!(legal_block(bits, 0, bits));
        assert!((0..n).all(|s| legal_block(bits, s, 0)));
    }

    #[test]
    fn greedy_is_optimal_in_one_dimension_for_every_set_of_16_cells() {
        // Theorem 6.2, checked exhaustively: the fewest legal blocks that exactly partition
        // each of the 65,536 subsets of 16 cells (dynamic programme over subsets) equals the
        // greedy count.
        let bits = 4;
        let n = 16usize;
        let mut blocks: Vec<u32> = Vec::new(); // bit masks of legal blocks
        for m in 0..=bits {
            for s in 0..n as u32 {
                if legal_block(bits, s, m) {
                    let mask = (0..(1u32 << m)).fold(0u32, |acc, i| acc | 1 << ((s + i) % 16));
                    if !blocks.contains(&mask) {
                        blocks.push(mask);
                    }
                }
            }
        }
        let mut best = vec![u8::MAX; 1 << n];
        best[0] = 0;
        for mask in 1usize..(1 << n) {
            let low = mask.trailing_zeros();
            for &b in &blocks {
                let b = b as usize;
                if b & (1 << low) != 0 && b & mask == b {
                    let v = best[mask ^ b].saturating_add(1);
                    if v < best[mask] {
                        best[mask] = v;
                    }
                }
            }
        }
        for (mask, &b) in best.iter().enumerate() {
            let set: Vec<bool> = (0..n).map(|i| mask >> i & 1 == 1).collect();
            let g = greedy_1d(bits, &set);
            // The greedy blocks are legal, disjoint and cover exactly the set.
            let mut cover = 0usize;
            for b in &g {
                assert!(legal_block(bits, b.start, b.m));
                for k in 0..(1u32 << b.m) {
                    let bit = 1usize << ((b.start + k) % 16);
                    assert_eq!(cover & bit, 0, "overlap in {mask:#x}");
                    cover |= bit;
                }
            }
            assert_eq!(cover, mask);
            assert_eq!(g.len(), b as usize, "set {mask:#06x}");
        }
    }

    #[test]
    fn cell_structure_counts_and_lookup() {
        let g = CellGrid::new();
        assert_eq!(g.len(), 21_362);
        assert_eq!(g.cells_in_row(63), 256);
        assert_eq!(g.cells_in_row(64), 256);
        assert_eq!(g.cells_in_row(62), 256);
        assert_eq!(g.cells_in_row(65), 256);
        assert!(g.cells_in_row(100) % 4 == 0 && g.cells_in_row(100) < 256);
        for (lat, lon) in [(40.7, -74.0), (-33.9, 151.2), (89.9, 10.0), (0.0, 179.99)] {
            let c = g.cell_at(lat, lon);
            let (clat, clon) = g.centre(c);
            assert_eq!(g.cell_at(clat, clon), c);
            assert_eq!(g.cell_of_id(g.id(c)), c);
            let d = crate::geo::great_circle_km(lat, lon, clat, clon);
            assert!(d < 160.0, "{lat},{lon}: {d} km from centre");
        }
        // Neighbouring equatorial cells' addresses differ in one bit.
        let a = g.address(Cell { row: 64, index: 10 });
        let b = g.address(Cell { row: 64, index: 11 });
        assert_eq!((a ^ b).count_ones(), 1);
    }

    #[test]
    fn two_d_greedy_covers_exactly() {
        let mut labels = vec![0u16; (ROWS * COLUMNS) as usize];
        // A 20 × 40 rectangle and a scattered set.
        for r in 30..50 {
            for c in 100..140 {
                labels[r * 256 + c] = 1;
            }
        }
        for i in (0..labels.len()).step_by(977) {
            labels[i] = 1;
        }
        let blocks = greedy_2d(&labels, 1);
        let mut covered = vec![false; labels.len()];
        for b in &blocks {
            for i in 0..(1usize << b.a) {
                for j in 0..(1usize << b.b) {
                    let k = ((b.row as usize + i) % 128) * 256 + (b.col as usize + j) % 256;
                    assert!(!covered[k]);
                    covered[k] = true;
                }
            }
        }
        for (k, &l) in labels.iter().enumerate() {
            assert_eq!(covered[k], l == 1);
        }
        let n = labels.iter().filter(|&&l| l == 1).count();
        assert!(
            blocks.len() * 5 < n,
            "{} blocks for {n} points",
            blocks.len()
        );
    }
}
