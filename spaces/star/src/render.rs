//! What a star job's answer shows: the JSON result, the text report, and both written straight to text. The
//! answer is built once per job, on the coordinator, from up to 10,000 listed stars; it is apart from the kernels
//! because none of it runs per chunk.

use serde_json::{json, Value};

use sweep_space::Answer;

use crate::geometry::Geometry;
use crate::labels::{parse_solution_into, write_labels};
use crate::params::Method;

/// The answer as a JSON tree. Its keys `seed_fields` and `seed_numbering` name the original program's field
/// numbering; they are kept as they are because stored answers and their readers use them.
pub(crate) fn result(geo: &Geometry, method: Method, answer: &Answer) -> Value {
    let n = geo.n;
    // Values built in place: `json!` serializes a copy of whatever it is given, and an answer shows up to
    // 10,000 stars.
    let numbers = |labels: &[u8]| Value::Array(labels.iter().map(|&l| Value::from(l)).collect());
    let mut canonical = Vec::with_capacity(answer.solutions.len());
    let mut field_forms = Vec::with_capacity(answer.solutions.len());
    let mut buf = [0; 64];
    for s in &answer.solutions {
        let Ok(labels) = parse_solution_into(s, 2 * n, &mut buf) else {
            continue;
        };
        let mut star = serde_json::Map::new();
        star.insert("outer".into(), numbers(&labels[..n]));
        star.insert("inner".into(), numbers(&labels[n..]));
        canonical.push(Value::Object(star));
        let mut form = String::with_capacity(4 * labels.len());
        write_labels(&mut form, &geo.field_form(labels), ", ");
        field_forms.push(form);
    }
    // The original program prints its unique solutions sorted as strings (distinct: each is one star's smallest
    // image).
    field_forms.sort_unstable();
    let mut result = json!({
        "points": n,
        "method": method,
        "magic_sum": geo.magic,
        "solutions": sweep_space::json_u128(answer.tally.counter("solutions")),
        "unique": sweep_space::json_u128(answer.tally.counter("unique")),
        "symmetries": 2 * n,
        "canonical_truncated": answer.solutions_truncated,
        "seed_fields": geo.fields,
    });
    if let Value::Object(map) = &mut result {
        map.insert("canonical".into(), Value::Array(canonical));
        map.insert(
            "seed_numbering".into(),
            Value::Array(field_forms.into_iter().map(Value::String).collect()),
        );
    }
    result
}

/// `result` and `render_text` without the tree: a listing job's answer shows 10,000 stars, and building,
/// writing and dropping their 250,000 values was most of its single-threaded end. The JSON's keys are in
/// the order a `serde_json::Map` keeps (alphabetical), and a test holds both texts byte for byte to the
/// tree's.
pub(crate) fn result_texts(geo: &Geometry, method: Method, answer: &Answer) -> (String, String) {
    use std::fmt::Write;
    let n = geo.n;
    let mut canonical = String::with_capacity(answer.solutions.len() * (8 * n + 24));
    let mut field_forms = Vec::with_capacity(answer.solutions.len());
    let mut buf = [0; 64];
    for s in &answer.solutions {
        let Ok(labels) = parse_solution_into(s, 2 * n, &mut buf) else {
            continue;
        };
        if !canonical.is_empty() {
            canonical.push(',');
        }
        canonical.push_str("{\"inner\":[");
        write_labels(&mut canonical, &labels[n..], ",");
        canonical.push_str("],\"outer\":[");
        write_labels(&mut canonical, &labels[..n], ",");
        canonical.push_str("]}");
        let mut form = String::with_capacity(4 * labels.len());
        write_labels(&mut form, &geo.field_form(labels), ", ");
        field_forms.push(form);
    }
    field_forms.sort_unstable();
    let solutions = sweep_space::json_u128(answer.tally.counter("solutions"));
    let unique = sweep_space::json_u128(answer.tally.counter("unique"));
    let method = serde_json::to_string(&method).unwrap_or_default();
    let fields = serde_json::to_string(&geo.fields).unwrap_or_default();
    let shown: usize = field_forms.iter().map(|f| f.len() + 3).sum();
    let mut json = String::with_capacity(canonical.len() + shown + 256);
    let _ = write!(
        json,
        "{{\"canonical\":[{canonical}],\"canonical_truncated\":{},\"magic_sum\":{},\"method\":{method},\
         \"points\":{n},\"seed_fields\":{fields},\"seed_numbering\":[",
        answer.solutions_truncated, geo.magic
    );
    drop(canonical);
    // Field forms are digits and ", " (`write_labels`): nothing in them needs escaping.
    for (i, f) in field_forms.iter().enumerate() {
        json.push_str(if i == 0 { "\"" } else { ",\"" });
        json.push_str(f);
        json.push('"');
    }
    let _ = write!(
        json,
        "],\"solutions\":{solutions},\"symmetries\":{},\"unique\":{unique}}}",
        2 * n
    );
    let mut text = String::with_capacity(shown + 256);
    let _ =
        writeln!(
        text,
        "{}-pointed magic stars (lines sum to {}): {} solutions, {} unique up to the {} symmetries",
        n, geo.magic, solutions, unique, 2 * n
    );
    write_field_forms(geo, &mut text, field_forms.iter().map(String::as_str));
    if answer.solutions_truncated {
        let _ = writeln!(text, "(list truncated; counts are exact)");
    }
    (json, text)
}

pub(crate) fn render_text(geo: &Geometry, result: &Value) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let n = geo.n;
    let _ =
        writeln!(
        s,
        "{}-pointed magic stars (lines sum to {}): {} solutions, {} unique up to the {} symmetries",
        n, geo.magic, result["solutions"], result["unique"], 2 * n
    );
    if let Some(list) = result["seed_numbering"].as_array() {
        write_field_forms(
            geo,
            &mut s,
            list.iter().map(|f| f.as_str().unwrap_or_default()),
        );
    }
    if result["canonical_truncated"].as_bool() == Some(true) {
        let _ = writeln!(s, "(list truncated; counts are exact)");
    }
    s
}

/// The original program's listing of unique stars, under a line naming its fields (nothing when there are none).
fn write_field_forms<'a>(
    geo: &Geometry,
    s: &mut String,
    forms: impl ExactSizeIterator<Item = &'a str>,
) {
    use std::fmt::Write;
    if forms.len() == 0 {
        return;
    }
    let fields: Vec<String> = geo.fields.iter().map(|c| cell_name(geo.n, *c)).collect();
    let _ = writeln!(
        s,
        "unique solutions in the original program's field numbering (fields {}):",
        fields.join(" ")
    );
    for form in forms {
        let _ = writeln!(s, "  {form}");
    }
}

fn cell_name(n: usize, c: u8) -> String {
    let c = usize::from(c);
    if c < n {
        format!("O{c}")
    } else {
        format!("J{}", c - n)
    }
}
