//! Move-sequence pruning: an automaton that walks only one twist sequence per group element among short ones.
//!
//! Why: the twists satisfy many short relations (minimal ones: 13 pairs `t u` equal to another pair, 14 of three
//! twists, 84 of four, 2,132 of five), so a plain walk of the twist tree reaches most positions several times: 38.8 M sequences of 7 twists
//! reach 19.1 M positions at distance 7. Probing the table costs a cache miss per leaf, so every duplicate leaf is
//! wasted time.
//!
//! Construction: enumerate every word of up to [`RELATION_LEN`] twists from solved and keep, per effect, the
//! shortlex-least word (shortest, then lexicographically smallest). A word that is not its effect's least word
//! is "forbidden"; the minimal ones (no forbidden proper subword) go into an Aho-Corasick automaton whose state
//! is the longest suffix of the walk that is a prefix of some forbidden word.
//!
//! Why nothing is lost: the shortlex-least word of any group element contains only shortlex-least subwords
//! (replacing a subword by a shortlex-smaller one with the same effect gives a shortlex-smaller word for the whole),
//! so it never enters a dead state. The twists act on positions as fixed signed slot permutations and freely (all
//! tiles differ), so positions at forward distance g from any start are exactly the ends of the surviving words of
//! length g. The immediate repeat `t t` (an involution) is one of the forbidden words.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::ball::{Ball, N_TWISTS};

/// Longest relation the automaton knows. Measured at depth 7 (distinct positions: 19,057,454): unpruned 38.8 M
/// sequences; relations up to 3 twists leave 21.1 M, up to 4 leave 20.7 M (275 states, built in 25 ms), up to 5
/// leave 19.9 M (4,792 states, but 0.7 s to build in every worker), up to 6 leave 19.4 M (12 s to build). Four is
/// where the build stops paying for itself.
pub const RELATION_LEN: usize = 4;

/// The automaton's dead state: the walk just completed a forbidden word.
pub const DEAD: u32 = u32::MAX;

/// Transitions of the automaton: `next[state * 13 + t]`, [`DEAD`] for a pruned twist. State 0 is the start.
#[derive(Debug)]
pub struct Pruner {
    next: Vec<u32>,
    /// Minimal forbidden words per length, for the report and the tests.
    pub forbidden_per_len: Vec<usize>,
}

impl Pruner {
    /// The process-wide automaton (built once, about 25 ms).
    pub fn get() -> &'static Pruner {
        static P: OnceLock<Pruner> = OnceLock::new();
        P.get_or_init(|| Pruner::build(RELATION_LEN))
    }

    /// The start state (empty walk).
    pub const START: u32 = 0;

    /// The state after twist `t` from `state`, or [`DEAD`] if the walk would end in a forbidden word.
    #[inline]
    pub fn step(&self, state: u32, t: usize) -> u32 {
        self.next[state as usize * N_TWISTS + t]
    }

    pub fn states(&self) -> usize {
        self.next.len() / N_TWISTS
    }

    /// Builds the automaton from relations of up to `max_len` twists.
    pub fn build(max_len: usize) -> Pruner {
        let mut words: Vec<(Vec<u8>, Ball)> = Vec::new();
        enumerate(Ball::SOLVED, &mut Vec::new(), max_len, &mut words);
        // Enumeration is in shortlex order (by length, then lexicographic), so the first word of an effect wins.
        words.sort_by(|a, b| a.0.len().cmp(&b.0.len()).then_with(|| a.0.cmp(&b.0)));
        let mut least: HashMap<Ball, usize> = HashMap::with_capacity(words.len());
        for (i, (_, b)) in words.iter().enumerate() {
            least.entry(*b).or_insert(i);
        }
        // Trie of minimal forbidden words. A word is minimal forbidden iff it is not least while its two maximal
        // proper subwords (drop first, drop last) both are; walking words by length finds them in order.
        let mut trie: Vec<[u32; N_TWISTS]> = vec![[0; N_TWISTS]];
        let mut terminal = vec![false];
        let mut per_len = vec![0usize; max_len + 1];
        let mut is_least: HashMap<&[u8], bool> = HashMap::with_capacity(words.len());
        let mut forbidden: Vec<Vec<u8>> = Vec::new();
        for t in 0..N_TWISTS as u8 {
            forbidden.push(vec![t, t]);
            per_len[2] += 1;
        }
        for (i, (w, b)) in words.iter().enumerate() {
            let least_here = least[b] == i;
            is_least.insert(w.as_slice(), least_here);
            if !least_here && w.len() >= 2 {
                let inner_ok = is_least.get(&w[1..]).copied().unwrap_or(false)
                    && is_least.get(&w[..w.len() - 1]).copied().unwrap_or(false);
                if inner_ok {
                    per_len[w.len()] += 1;
                    forbidden.push(w.clone());
                }
            }
        }
        for w in &forbidden {
            let mut s = 0usize;
            for &t in w {
                let child = trie[s][t as usize];
                s = if child == 0 {
                    trie.push([0; N_TWISTS]);
                    terminal.push(false);
                    let n = trie.len() - 1;
                    trie[s][t as usize] = n as u32;
                    n
                } else {
                    child as usize
                };
            }
            terminal[s] = true;
        }
        // Aho-Corasick: breadth-first failure links, then complete transitions.
        let n = trie.len();
        let mut fail = vec![0usize; n];
        let mut next = vec![0u32; n * N_TWISTS];
        let mut queue = std::collections::VecDeque::new();
        for t in 0..N_TWISTS {
            let c = trie[0][t] as usize;
            if c != 0 {
                fail[c] = 0;
                queue.push_back(c);
            }
            next[t] = c as u32;
        }
        while let Some(s) = queue.pop_front() {
            terminal[s] |= terminal[fail[s]];
            for t in 0..N_TWISTS {
                let c = trie[s][t] as usize;
                if c != 0 {
                    fail[c] = next[fail[s] * N_TWISTS + t] as usize;
                    queue.push_back(c);
                    next[s * N_TWISTS + t] = c as u32;
                } else {
                    next[s * N_TWISTS + t] = next[fail[s] * N_TWISTS + t];
                }
            }
        }
        // Breadth-first order visits a node after its failure target, so `terminal` above is complete.
        for v in next.iter_mut() {
            if terminal[*v as usize] {
                *v = DEAD;
            }
        }
        Pruner {
            next,
            forbidden_per_len: per_len,
        }
    }
}

fn enumerate(ball: Ball, word: &mut Vec<u8>, max_len: usize, out: &mut Vec<(Vec<u8>, Ball)>) {
    out.push((word.clone(), ball));
    if word.len() == max_len {
        return;
    }
    for t in 0..N_TWISTS as u8 {
        if word.last() == Some(&t) {
            continue;
        }
        word.push(t);
        enumerate(ball.twist(t as usize), word, max_len, out);
        word.pop();
    }
}
