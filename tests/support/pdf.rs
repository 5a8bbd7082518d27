//! Made-up PDF files for the `read_pdf` tests: a small writer that lays
//! out numbered objects, the cross-reference table and the trailer, so a
//! test can make a good document or a hostile one byte by byte.

/// A PDF being written; objects are numbered from 1 in the order given.
#[derive(Default)]
pub struct Pdf {
    objects: Vec<Vec<u8>>,
}

impl Pdf {
    /// The number the next object gets.
    pub fn next(&self) -> usize {
        self.objects.len() + 1
    }

    /// Adds an object; its number.
    pub fn add(&mut self, body: impl Into<Vec<u8>>) -> usize {
        self.objects.push(body.into());
        self.objects.len()
    }

    /// Adds a stream object with `dict` entries (besides `/Length`).
    pub fn stream(&mut self, dict: &str, data: &[u8]) -> usize {
        let mut body = format!("<< {dict} /Length {} >>\nstream\n", data.len()).into_bytes();
        body.extend_from_slice(data);
        body.extend_from_slice(b"\nendstream");
        self.add(body)
    }

    /// The file, with object `root` as the catalog.
    pub fn finish(self, root: usize) -> Vec<u8> {
        let mut out = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n".to_vec();
        let mut offsets = Vec::new();
        for (i, body) in self.objects.iter().enumerate() {
            offsets.push(out.len());
            out.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
            out.extend_from_slice(body);
            out.extend_from_slice(b"\nendobj\n");
        }
        let xref = out.len();
        out.extend_from_slice(
            format!("xref\n0 {}\n0000000000 65535 f \n", offsets.len() + 1).as_bytes(),
        );
        for offset in offsets {
            out.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
        }
        out.extend_from_slice(
            format!(
                "trailer\n<< /Size {} /Root {root} 0 R >>\nstartxref\n{xref}\n%%EOF\n",
                self.objects.len() + 1
            )
            .as_bytes(),
        );
        out
    }
}

/// An image on a page: width, height and 8-bit RGB pixels.
pub struct Image {
    pub width: u32,
    pub height: u32,
    pub rgb: Vec<u8>,
}

/// A document with one page per text, in Helvetica; `image` is drawn on
/// the first page; `content` replaces the first page's content stream.
pub fn document(
    pages: &[&str],
    image: Option<&Image>,
    content: Option<(&str, Vec<u8>)>,
) -> Vec<u8> {
    let mut pdf = Pdf::default();
    let font = pdf.add("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>");
    let image = image.map(|i| {
        pdf.stream(
            &format!(
                "/Type /XObject /Subtype /Image /Width {} /Height {} /ColorSpace /DeviceRGB /BitsPerComponent 8",
                i.width, i.height
            ),
            &i.rgb,
        )
    });
    // Pages come after their contents; their parent after them.
    let parent = pdf.next() + pages.len() * 2;
    let mut kids = Vec::new();
    for (n, text) in pages.iter().enumerate() {
        let escaped = text.replace('\\', "\\\\").replace('(', "\\(").replace(')', "\\)");
        let mut ops = format!("BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET");
        if let (0, Some(_)) = (n, image) {
            ops.push_str(" q 100 0 0 100 72 500 cm /Im1 Do Q");
        }
        let contents = match (n, &content) {
            (0, Some((dict, data))) => pdf.stream(dict, data),
            _ => pdf.stream("", ops.as_bytes()),
        };
        let xobject = match (n, image) {
            (0, Some(id)) => format!(" /XObject << /Im1 {id} 0 R >>"),
            _ => String::new(),
        };
        kids.push(pdf.add(format!(
            "<< /Type /Page /Parent {parent} 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 {font} 0 R >>{xobject} >> /Contents {contents} 0 R >>"
        )));
    }
    let kids: Vec<String> = kids.iter().map(|k| format!("{k} 0 R")).collect();
    let pages_id =
        pdf.add(format!("<< /Type /Pages /Kids [{}] /Count {} >>", kids.join(" "), kids.len()));
    assert_eq!(pages_id, parent);
    let root = pdf.add(format!("<< /Type /Catalog /Pages {parent} 0 R >>"));
    pdf.finish(root)
}
