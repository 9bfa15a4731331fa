// MathJax 3 settings for pymdownx.arithmatex (generic mode): it wraps maths in
// \( \) and \[ \] inside elements of class "arithmatex"; only those are typeset.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex"
  },
  chtml: {
    // Fonts are shipped next to tex-chtml.js (docs/javascripts/mathjax/).
    fontURL: new URL("mathjax/output/chtml/fonts/woff-v2",
                     document.currentScript.src).href
  }
};
// Pages are loaded in full (no `navigation.instant`), so MathJax typesets
// each page once at start-up; nothing to re-run on navigation.
