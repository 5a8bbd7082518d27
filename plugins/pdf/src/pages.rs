//! Page selections such as `1-3,7`.

/// The pages `spec` names, in order, each once; all `count` pages when
/// there is no spec. The error says what is wrong with it.
pub fn select(spec: Option<&str>, count: u32) -> Result<Vec<u32>, String> {
    let Some(spec) = spec.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok((1..=count).collect());
    };
    let mut pages = Vec::new();
    for part in spec.split(',').map(str::trim) {
        let number = |text: &str| {
            text.trim().parse::<u32>().map_err(|_| {
                format!("pages `{spec}`: `{part}` is not a page number or a range such as 2-5")
            })
        };
        let (from, to) = match part.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => (number(part)?, number(part)?),
        };
        if from == 0 || from > to || to > count {
            return Err(format!(
                "pages `{spec}`: `{part}` is not within the document's pages 1-{count}"
            ));
        }
        for page in from..=to {
            if !pages.contains(&page) {
                pages.push(page);
            }
        }
    }
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections_name_pages_and_bad_ones_say_why() {
        assert_eq!(select(None, 3).unwrap(), [1, 2, 3]);
        assert_eq!(select(Some(" 2-3, 1,3 "), 5).unwrap(), [2, 3, 1]);
        assert!(select(Some("4"), 3).unwrap_err().contains("within the document's pages 1-3"));
        assert!(select(Some("3-1"), 3).is_err());
        assert!(select(Some("x"), 3).unwrap_err().contains("not a page number"));
        assert!(select(Some("0"), 3).is_err());
    }
}
