//! The HTML table view of an array, shown by Jupyter next to the `text/plain` repr (the
//! terminal keeps the text). Beyond JAX, whose arrays have only a text repr.
//!
//! Layout: a caption with the type (`float32[2,3]`, and `weak_type` when set), then
//! 0-d: one cell; 1-d: one row under a row of indices; 2-d: a grid with row and column
//! indices; more dimensions: one 2-d table per index of the leading axes, each titled with
//! its index (`[1, :, :]`). Element texts are numpy's (one format for the whole array), and
//! arrays of more than 1000 elements are summarised with numpy's edge items (3 per side,
//! the gap shown as `…`), as in the text repr. Arrays of 1 MiB or more show only the
//! caption, as JAX 0.11.1's repr shows only the shape.

use super::html_escape;
use super::repr::{ElementTexts, MAX_PRINT_BYTES, ReprData, SUMMARY_EDGE, element_texts};

const TABLE: &str = "<table style=\"border-collapse:collapse;font-family:monospace;font-size:90%\">";
const TH: &str = "<th style=\"color:#888;font-weight:normal;padding:1px 6px;text-align:right\">";
const TD: &str = "<td style=\"padding:1px 6px;text-align:right\">";

/// The HTML view of an array with `shape` (row-major `data`); see the module doc.
pub fn array_html(data: ReprData<'_>, shape: &[usize], weak_type: bool) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let mut caption = format!("<b>Array</b> {}[{}]", data.dtype_name(), dims.join(","));
    if weak_type {
        caption.push_str(" weak_type");
    }
    let size = data.len();
    let mut out = String::from("<div class=\"jaxrepl-array\">");
    if size * data.itemsize() >= MAX_PRINT_BYTES && shape.iter().product::<usize>() == size {
        out.push_str(&format!("<div>{caption} <i>(values not shown: {} bytes)</i></div></div>", size * data.itemsize()));
        return out;
    }
    out.push_str(&format!("<div>{caption}</div>"));
    let Some(el) = element_texts(data, shape) else {
        out.push_str("<div><i>(no elements)</i></div></div>");
        return out;
    };
    match shape.len() {
        0 => out.push_str(&format!("{TABLE}<tr>{TD}{}</td></tr></table>", html_escape(&(el.text)(0)))),
        1 => table_1d(&el, &mut out),
        _ => {
            let lead = shape.len() - 2;
            leading(&el, lead, 0, 0, &mut Vec::new(), &mut out);
        }
    }
    out.push_str("</div>");
    out
}

/// Shown indices of `axis` with `None` where the summary gap goes.
fn shown(el: &ElementTexts<'_>, axis: usize) -> Vec<Option<usize>> {
    let (idx, gap) = &el.axes[axis];
    let mut v = Vec::with_capacity(idx.len() + 1);
    for (k, &i) in idx.iter().enumerate() {
        if *gap && k == SUMMARY_EDGE {
            v.push(None);
        }
        v.push(Some(i));
    }
    v
}

/// One header cell per shown index (`…` at the summary gap).
fn index_headers(cols: &[Option<usize>], out: &mut String) {
    for c in cols {
        out.push_str(TH);
        out.push_str(&c.map_or("…".to_string(), |i| i.to_string()));
        out.push_str("</th>");
    }
}

fn table_1d(el: &ElementTexts<'_>, out: &mut String) {
    let cols = shown(el, 0);
    out.push_str(TABLE);
    out.push_str("<tr>");
    index_headers(&cols, out);
    out.push_str("</tr><tr>");
    for c in &cols {
        out.push_str(TD);
        out.push_str(&c.map_or("…".to_string(), |i| html_escape(&(el.text)(i * el.strides[0]))));
        out.push_str("</td>");
    }
    out.push_str("</tr></table>");
}

/// One 2-d table per shown index of the leading axes `axis..lead`.
fn leading(el: &ElementTexts<'_>, lead: usize, axis: usize, offset: usize, index: &mut Vec<String>, out: &mut String) {
    if axis == lead {
        if lead > 0 {
            let title: Vec<String> = index.iter().cloned().chain([":".to_string(), ":".to_string()]).collect();
            out.push_str(&format!("<div style=\"font-family:monospace;color:#888\">[{}]</div>", title.join(", ")));
        }
        table_2d(el, lead, offset, out);
        return;
    }
    for i in shown(el, axis) {
        match i {
            None => out.push_str("<div style=\"font-family:monospace\">…</div>"),
            Some(i) => {
                index.push(i.to_string());
                leading(el, lead, axis + 1, offset + i * el.strides[axis], index, out);
                index.pop();
            }
        }
    }
}

fn table_2d(el: &ElementTexts<'_>, r: usize, offset: usize, out: &mut String) {
    let rows = shown(el, r);
    let cols = shown(el, r + 1);
    out.push_str(TABLE);
    out.push_str("<tr><th></th>");
    index_headers(&cols, out);
    out.push_str("</tr>");
    for row in &rows {
        out.push_str("<tr>");
        out.push_str(TH);
        out.push_str(&row.map_or("⋮".to_string(), |i| i.to_string()));
        out.push_str("</th>");
        for c in &cols {
            out.push_str(TD);
            let cell = match (row, c) {
                (Some(i), Some(j)) => html_escape(&(el.text)(offset + i * el.strides[r] + j * el.strides[r + 1])),
                (None, Some(_)) => "⋮".to_string(),
                (Some(_), None) => "…".to_string(),
                (None, None) => "⋱".to_string(),
            };
            out.push_str(&cell);
            out.push_str("</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The visible cell texts of an HTML table, in document order.
    fn cells(html: &str) -> Vec<String> {
        let mut v = Vec::new();
        for part in html.split("<td").skip(1) {
            let start = part.find('>').unwrap() + 1;
            let end = part.find("</td>").unwrap();
            v.push(part[start..end].to_string());
        }
        v
    }

    #[test]
    fn two_d_grid_has_numpy_element_texts() {
        let h = array_html(ReprData::F32(&[1.0, 2.5, -3.0, 4.0, 5.0, 6.0]), &[2, 3], false);
        assert!(h.contains("<b>Array</b> float32[2,3]"), "{h}");
        assert_eq!(cells(&h), ["1. ", "2.5", "-3. ", "4. ", "5. ", "6. "].map(|s| s.trim().to_string()));
        // numpy pads every element to one width; the table cell drops the padding only.
        assert_eq!(h.matches("<tr>").count(), 3);
    }

    #[test]
    fn scalar_one_d_weak_and_empty() {
        let h = array_html(ReprData::I32(&[7]), &[], true);
        assert!(h.contains("int32[] weak_type"), "{h}");
        assert_eq!(cells(&h), ["7"]);
        let h = array_html(ReprData::Bool(&[true, false]), &[2], false);
        assert_eq!(cells(&h), ["True", "False"]);
        let h = array_html(ReprData::F32(&[]), &[0, 3], false);
        assert!(h.contains("(no elements)"), "{h}");
    }

    #[test]
    fn three_d_is_one_table_per_leading_index() {
        let data: Vec<i32> = (0..12).collect();
        let h = array_html(ReprData::I32(&data), &[2, 2, 3], false);
        assert!(h.contains("[0, :, :]") && h.contains("[1, :, :]"), "{h}");
        assert_eq!(cells(&h), (0..12).map(|i: i32| i.to_string()).collect::<Vec<_>>());
    }

    #[test]
    fn large_arrays_are_summarised_with_edge_items() {
        let data: Vec<f32> = (0..40 * 40).map(|i| i as f32).collect();
        let h = array_html(ReprData::F32(&data), &[40, 40], false);
        // 6 shown rows and columns plus one gap each: 7×7 cells.
        assert_eq!(cells(&h).len(), 49);
        assert!(h.contains("⋱") && h.contains("…") && h.contains("⋮"));
        // numpy switches to scientific notation when max/min > 1e3 (here 1599/1).
        assert!(cells(&h).contains(&"1.599e+03".to_string()), "{:?}", cells(&h));
        let big = vec![0f32; 300_000];
        let h = array_html(ReprData::F32(&big), &[300_000], false);
        assert!(h.contains("values not shown: 1200000 bytes"), "{h}");
    }

    #[test]
    fn mismatched_shape_does_not_panic() {
        let h = array_html(ReprData::F32(&[1.0]), &[3], false);
        assert!(h.contains("(no elements)"), "{h}");
    }
}
