//! The tables of the documentation that tests hold to the code: each follows a marker comment
//! (`<!-- name: ... -->`), a header and a separator line.

/// The cells of each row of the table after `<!-- {marker}`, trimmed, without the empty cells
/// outside the first and last `|`.
pub fn rows(page: &str, marker: &str) -> Vec<Vec<String>> {
    let table = page
        .split_once(&format!("<!-- {marker}"))
        .unwrap_or_else(|| panic!("no table marked {marker}"))
        .1;
    table
        .lines()
        .skip(3) // the marker's line, the header, the separator
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            cells[1..cells.len() - 1]
                .iter()
                .map(|c| (*c).to_owned())
                .collect()
        })
        .collect()
}
