//! The test site: one page and the objects it pulls in, built the way real pages are built, so a
//! browser meets the same chains of dependent requests it meets on the Web.
//!
//! The page (`/site/index.html`) holds in its head one style sheet and two parser-blocking
//! scripts, and in its body ten images and the elements the style sheets decorate. The chains,
//! each link a request the browser can only make once the previous object has arrived:
//!
//! - `index.html` → `css/main.css` → `css/theme.css` (`@import`) → `img/logo.svg` (a background);
//!   `css/main.css` also → `img/hero.svg` (a background);
//! - `index.html` → `js/vendor.js` (blocks the parser) → `js/app.js` (blocks the parser) →
//!   `js/widget.js` (inserted by `app.js`) → `img/w1.svg` … `img/w4.svg` (inserted by `widget.js`);
//! - `index.html` → `img/p1.svg` … `img/p10.svg`.
//!
//! 22 objects, 868,000 bytes: a median-sized page of the 2020s in weight and count, with a
//! critical path of four dependent requests after the page itself. Bodies are padded with
//! deterministic letters inside comments to their sizes, so every byte counts and nothing
//! compresses away (the origin sends them as they are, without content coding).
//!
//! The page measures itself: at its load event an inline script writes one line,
//! `satstp-load load_ms=… dcl_ms=… ttfb_ms=… resources=… failed=… broken_images=… scripts=… css=… proto=…`,
//! from the browser's Navigation and Resource Timing entries (times in milliseconds since the
//! navigation started), the count of images that did not decode, of scripts that ran and whether
//! the imported style sheet applied and the page's protocol (`nextHopProtocol`); and below it one line per fetch (the navigation first),
//! `satstp-res KIND PATH start connectStart secureConnectionStart connectEnd requestStart
//! responseStart responseEnd`, the browser's Resource Timing for the waterfall ([`crate::waterfall`]). [`crate::chromium`]
//! reads both from the page's DOM.

/// One object of the site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteObject {
    /// Absolute path, e.g. `/site/css/main.css`.
    pub path: String,
    /// The `Content-Type` to serve it with.
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

/// The test site (see the module documentation).
#[derive(Debug, Clone)]
pub struct Site {
    objects: Vec<SiteObject>,
}

/// Path of the page.
pub const PAGE_PATH: &str = "/site/index.html";

/// Scripts on the site; each adds one to `window.satstpScripts` when it runs.
const SCRIPTS: [(&str, usize); 3] = [
    ("js/vendor.js", 90_000),
    ("js/app.js", 60_000),
    ("js/widget.js", 25_000),
];
const PAGE_IMAGES: [usize; 10] = [
    15_000, 25_000, 35_000, 45_000, 55_000, 20_000, 30_000, 40_000, 50_000, 60_000,
];
const WIDGET_IMAGES: [usize; 4] = [10_000, 20_000, 30_000, 40_000];
const HTML_BYTES: usize = 30_000;
const MAIN_CSS_BYTES: usize = 40_000;
const THEME_CSS_BYTES: usize = 20_000;
const HERO_BYTES: usize = 120_000;
const LOGO_BYTES: usize = 8_000;

impl Site {
    /// The standard test site (fixed composition and sizes, so runs compare).
    pub fn standard() -> Site {
        let mut objects = Vec::new();
        let mut pad = Padding::new(0x5a7_57b);

        let mut html = String::from(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>satstp test page</title>\n\
             <link rel=\"stylesheet\" href=\"css/main.css\">\n\
             <script src=\"js/vendor.js\"></script>\n\
             <script src=\"js/app.js\"></script>\n\
             </head><body>\n\
             <div class=\"hero\">hero</div><div class=\"logo\">logo</div>\n\
             <div id=\"satstp-probe\"></div>\n<div id=\"widgets\"></div>\n",
        );
        for (i, _) in PAGE_IMAGES.iter().enumerate() {
            html.push_str(&format!(
                "<img src=\"img/p{}.svg\" alt=\"picture {}\">\n",
                i + 1,
                i + 1
            ));
        }
        html.push_str(
            "<pre id=\"satstp-result\">satstp-pending</pre>\n<pre id=\"satstp-waterfall\"></pre>\n<script>\n",
        );
        html.push_str(RESULT_SCRIPT);
        html.push_str("</script>\n");
        let html = pad.fill_html(html, "</body></html>\n", HTML_BYTES);
        objects.push(SiteObject {
            path: PAGE_PATH.to_string(),
            content_type: "text/html; charset=utf-8",
            body: html.into_bytes(),
        });

        let main_css = "@import url(\"theme.css\");\n\
                        .hero { height: 40px; background-image: url(\"../img/hero.svg\"); }\n";
        objects.push(css("main.css", pad.fill_block(main_css, MAIN_CSS_BYTES)));
        let theme_css = ".logo { height: 20px; background-image: url(\"../img/logo.svg\"); }\n\
                         #satstp-probe { width: 7px; height: 1px; }\n";
        objects.push(css("theme.css", pad.fill_block(theme_css, THEME_CSS_BYTES)));

        let mut widget_js = String::from(
            "window.satstpScripts = (window.satstpScripts || 0) + 1;\n\
             (function () {\n  function add() {\n    var box = document.getElementById('widgets');\n",
        );
        for i in 0..WIDGET_IMAGES.len() {
            widget_js.push_str(&format!(
                "    var im{i} = document.createElement('img'); im{i}.src = 'img/w{n}.svg'; im{i}.alt = 'widget {n}'; box.appendChild(im{i});\n",
                n = i + 1
            ));
        }
        widget_js.push_str(
            "  }\n  if (document.readyState === 'loading') { document.addEventListener('DOMContentLoaded', add); } else { add(); }\n})();\n",
        );
        let scripts = [
            "window.satstpScripts = (window.satstpScripts || 0) + 1;\n".to_string(),
            "window.satstpScripts = (window.satstpScripts || 0) + 1;\n\
             (function () {\n  var s = document.createElement('script');\n  s.src = 'js/widget.js';\n  document.head.appendChild(s);\n})();\n"
                .to_string(),
            widget_js,
        ];
        for ((name, size), text) in SCRIPTS.iter().zip(scripts) {
            objects.push(SiteObject {
                path: format!("/site/{name}"),
                content_type: "text/javascript",
                body: pad.fill_block(&text, *size).into_bytes(),
            });
        }

        objects.push(svg(&mut pad, "hero.svg", HERO_BYTES));
        objects.push(svg(&mut pad, "logo.svg", LOGO_BYTES));
        for (i, size) in PAGE_IMAGES.iter().enumerate() {
            objects.push(svg(&mut pad, &format!("p{}.svg", i + 1), *size));
        }
        for (i, size) in WIDGET_IMAGES.iter().enumerate() {
            objects.push(svg(&mut pad, &format!("w{}.svg", i + 1), *size));
        }
        Site { objects }
    }

    /// Every object, the page first.
    pub fn objects(&self) -> &[SiteObject] {
        &self.objects
    }

    /// The object at `path` (query string ignored).
    pub fn get(&self, path: &str) -> Option<&SiteObject> {
        let path = path.split('?').next().unwrap_or(path);
        self.objects.iter().find(|o| o.path == path)
    }

    /// Objects the page pulls in (every object but the page).
    pub fn subresources(&self) -> usize {
        self.objects.len() - 1
    }

    /// Scripts that must have run when the load event fires.
    pub fn scripts(&self) -> usize {
        SCRIPTS.len()
    }

    /// The paths `object` references (links, scripts, images, `@import`s and backgrounds, and
    /// the URLs scripts insert), resolved to absolute paths: style sheets' URLs against the
    /// style sheet, the others' against the page.
    pub fn references(&self, object: &SiteObject) -> Vec<String> {
        let Ok(text) = std::str::from_utf8(&object.body) else {
            return Vec::new();
        };
        let dir = if object.content_type == "text/css" {
            &object.path[..object.path.rfind('/').map_or(0, |i| i + 1)]
        } else {
            "/site/"
        };
        let mut out = Vec::new();
        for marker in ["src=\"", "href=\"", "url(\"", ".src = '"] {
            for piece in text.split(marker).skip(1) {
                if let Some(end) = piece.find(['"', '\'']) {
                    out.push(normalize(&format!("{dir}{}", &piece[..end])));
                }
            }
        }
        out
    }

    /// The object that references `path` (`None` for the page and for unknown paths): the
    /// request that must arrive before the browser can ask for `path`.
    pub fn referrer(&self, path: &str) -> Option<&str> {
        self.objects
            .iter()
            .find(|o| self.references(o).iter().any(|r| r == path))
            .map(|o| o.path.as_str())
    }

    /// Bytes of all objects' bodies.
    pub fn total_bytes(&self) -> usize {
        self.objects.iter().map(|o| o.body.len()).sum()
    }
}

/// Writes the result line at the load event (see the module documentation).
const RESULT_SCRIPT: &str = "window.addEventListener('load', function () {\n\
  var nav = performance.getEntriesByType('navigation')[0];\n\
  var res = performance.getEntriesByType('resource');\n\
  var failed = 0;\n\
  for (var i = 0; i < res.length; i++) { var st = res[i].responseStatus; if (st !== undefined && st !== 0 && st !== 200) { failed++; } }\n\
  var broken = 0;\n\
  for (var j = 0; j < document.images.length; j++) { var im = document.images[j]; if (!im.complete || im.naturalWidth === 0) { broken++; } }\n\
  var css = getComputedStyle(document.getElementById('satstp-probe')).width === '7px' ? 1 : 0;\n\
  document.getElementById('satstp-result').textContent = 'satstp-load load_ms=' + nav.loadEventStart.toFixed(1) +\n\
    ' dcl_ms=' + nav.domContentLoadedEventStart.toFixed(1) + ' ttfb_ms=' + nav.responseStart.toFixed(1) +\n\
    ' resources=' + res.length + ' failed=' + failed + ' broken_images=' + broken +\n\
    ' scripts=' + (window.satstpScripts || 0) + ' css=' + css + ' proto=' + (nav.nextHopProtocol || 'unknown');\n\
  var f = function (v) { return (v || 0).toFixed(1); };\n\
  var all = [nav].concat(res), lines = [];\n\
  // The marker is built so that this script's own text never holds it.\n\
  for (var k = 0; k < all.length; k++) { var e = all[k];\n\
    lines.push('satstp' + '-res ' + (e.initiatorType || 'other') + ' ' + new URL(e.name).pathname + ' ' + f(e.startTime) + ' ' +\n\
      f(e.connectStart) + ' ' + f(e.secureConnectionStart) + ' ' + f(e.connectEnd) + ' ' + f(e.requestStart) + ' ' + f(e.responseStart) + ' ' + f(e.responseEnd)); }\n\
  document.getElementById('satstp-waterfall').textContent = lines.join('\\n');\n\
});\n";

/// `path` without `.` and `..` segments.
fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            ".." => {
                parts.pop();
            }
            "." => {}
            p => parts.push(p),
        }
    }
    parts.join("/")
}

fn css(name: &str, text: String) -> SiteObject {
    SiteObject {
        path: format!("/site/css/{name}"),
        content_type: "text/css",
        body: text.into_bytes(),
    }
}

fn svg(pad: &mut Padding, name: &str, size: usize) -> SiteObject {
    let head = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"32\" height=\"32\">\
                <rect width=\"32\" height=\"32\" fill=\"#3a6ea5\"/>\n<!-- ";
    let mut text = String::from(head);
    let tail = " -->\n</svg>\n";
    pad.push_letters(&mut text, size.saturating_sub(head.len() + tail.len()));
    text.push_str(tail);
    SiteObject {
        path: format!("/site/img/{name}"),
        content_type: "image/svg+xml",
        body: text.into_bytes(),
    }
}

/// Deterministic filler: lowercase letters and spaces (never a comment terminator), from a
/// xorshift generator so the bodies are the same on every run and do not compress.
struct Padding {
    state: u64,
}

impl Padding {
    fn new(seed: u64) -> Padding {
        Padding { state: seed | 1 }
    }

    fn push_letters(&mut self, out: &mut String, n: usize) {
        for i in 0..n {
            self.state ^= self.state << 13;
            self.state ^= self.state >> 7;
            self.state ^= self.state << 17;
            let c = if i % 9 == 8 {
                ' '
            } else {
                (b'a' + (self.state % 26) as u8) as char
            };
            out.push(c);
        }
    }

    /// `text` then a `/* … */` comment up to `size` bytes (CSS and JavaScript).
    fn fill_block(&mut self, text: &str, size: usize) -> String {
        let mut out = String::from(text);
        out.push_str("/* ");
        let n = size.saturating_sub(out.len() + 4);
        self.push_letters(&mut out, n);
        out.push_str(" */\n");
        out
    }

    /// `html` then an HTML comment, then `tail`, up to `size` bytes.
    fn fill_html(&mut self, mut html: String, tail: &str, size: usize) -> String {
        html.push_str("<!-- ");
        let n = size.saturating_sub(html.len() + 5 + tail.len());
        self.push_letters(&mut html, n);
        html.push_str(" -->\n");
        html.push_str(tail);
        html
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_have_their_sizes_and_the_total_is_as_documented() {
        let site = Site::standard();
        assert_eq!(site.objects().len(), 22);
        assert_eq!(site.subresources(), 21);
        assert_eq!(site.total_bytes(), 868_000);
        assert_eq!(site.get(PAGE_PATH).map(|o| o.body.len()), Some(HTML_BYTES));
        assert_eq!(
            site.get("/site/js/vendor.js?v=1").map(|o| o.body.len()),
            Some(90_000)
        );
        assert!(site.get("/site/nothing").is_none());
    }

    #[test]
    fn every_reference_resolves_to_an_object() {
        // Follow the references written in the bodies, relative to each object's folder.
        let site = Site::standard();
        let mut seen = std::collections::BTreeSet::new();
        let mut todo = vec![PAGE_PATH.to_string()];
        while let Some(path) = todo.pop() {
            if !seen.insert(path.clone()) {
                continue;
            }
            let obj = site
                .get(&path)
                .unwrap_or_else(|| panic!("{path} referenced but missing"));
            let text = String::from_utf8(obj.body.clone()).expect("text");
            // Scripts' URLs resolve against the page, style sheets' against themselves.
            let dir = if obj.content_type == "text/javascript" {
                "/site/"
            } else {
                &path[..path.rfind('/').expect("absolute") + 1]
            };
            for marker in ["src=\"", "href=\"", "url(\"", ".src = '"] {
                for piece in text.split(marker).skip(1) {
                    let end = piece.find(['"', '\'']).expect("closed");
                    todo.push(normalize(&format!("{dir}{}", &piece[..end])));
                }
            }
        }
        assert_eq!(seen.len(), site.objects().len(), "reachable: {seen:?}");
    }

    #[test]
    fn every_object_but_the_page_has_the_referrer_that_pulls_it_in() {
        let site = Site::standard();
        for (path, referrer) in [
            ("/site/css/main.css", PAGE_PATH),
            ("/site/css/theme.css", "/site/css/main.css"),
            ("/site/img/logo.svg", "/site/css/theme.css"),
            ("/site/img/hero.svg", "/site/css/main.css"),
            ("/site/js/app.js", PAGE_PATH),
            ("/site/js/widget.js", "/site/js/app.js"),
            ("/site/img/w3.svg", "/site/js/widget.js"),
            ("/site/img/p10.svg", PAGE_PATH),
        ] {
            assert_eq!(site.referrer(path), Some(referrer), "{path}");
        }
        assert_eq!(site.referrer(PAGE_PATH), None);
        assert_eq!(site.referrer("/site/none"), None);
        for o in &site.objects()[1..] {
            assert!(site.referrer(&o.path).is_some(), "{}", o.path);
        }
    }

    #[test]
    fn padding_never_ends_a_comment_early() {
        let site = Site::standard();
        for o in site.objects() {
            let text = std::str::from_utf8(&o.body).expect("text");
            let opens = text.matches("/*").count() + text.matches("<!--").count();
            let closes = text.matches("*/").count() + text.matches("-->").count();
            assert_eq!(opens, closes, "{}", o.path);
        }
    }
}
