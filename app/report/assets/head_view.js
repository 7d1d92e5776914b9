/* Interactive head view for attention maps: pick a layer, a head and a token and see
 * the attention lines (tokens in two columns, line width and opacity by weight), in
 * the style of the figures of Vaswani et al. (2017), appendix.
 * Self-contained: no library, no network. Text is only ever set with textContent.
 *
 * Data (JSON, from probe.report.head_view):
 *   {tokens: [...], query_tokens: [...] | null, layers: [model layer per index],
 *    heads: [head per index], attn: [layer_i][head_i][query][key], title: "..."}
 * State is mirrored on the root element for tests: data-layer, data-head,
 * data-selected (token index or ""), data-lines (number of lines drawn).
 */
(function () {
  "use strict";
  if (window.ProbeHeadView) { window.ProbeHeadView.mountAll(); return; }
  var SVGNS = "http://www.w3.org/2000/svg";
  var MIN_WEIGHT = 0.02;

  function svg(tag, attrs, parent) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) { if (attrs.hasOwnProperty(k)) e.setAttribute(k, attrs[k]); }
    if (parent) parent.appendChild(e);
    return e;
  }

  function html(tag, text, parent) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (parent) parent.appendChild(e);
    return e;
  }

  function mount(root, data) {
    if (root.getAttribute("data-mounted")) return;
    root.setAttribute("data-mounted", "1");
    var keys = data.tokens, queries = data.query_tokens || data.tokens;
    var state = {li: 0, hi: 0, side: null, sel: null};
    if (data.initial) { state.li = data.initial[0] || 0; state.hi = data.initial[1] || 0; }

    var bar = html("div", null, root);
    bar.className = "phv-bar";
    if (data.title) { var t = html("span", data.title, bar); t.className = "phv-title"; }
    function select(label, values, prefix, key) {
      var lab = html("label", label + " ", bar);
      var s = html("select", null, lab);
      values.forEach(function (v, i) { var o = html("option", prefix + v, s); o.value = String(i); });
      s.value = String(state[key]);
      s.disabled = values.length < 2;
      s.addEventListener("change", function () { state[key] = parseInt(s.value, 10); draw(); });
      return s;
    }
    select("layer", data.layers, "L", "li");
    select("head", data.heads, "H", "hi");
    var hint = html("span", "click a token to see only its lines; click again for all", bar);
    hint.className = "phv-hint";

    var rowH = 18, colW = 150, gap = 160;
    var n = Math.max(keys.length, queries.length);
    var width = colW * 2 + gap, height = n * rowH + 10;
    var box = svg("svg", {width: width, height: height, viewBox: "0 0 " + width + " " + height,
      "class": "phv-svg", role: "img"}, root);
    var lines = svg("g", {}, box);
    var left = [], right = [];
    function label(x, y, text, anchor, side, i) {
      var e = svg("text", {x: x, y: y, "text-anchor": anchor, "class": "phv-tok", "data-side": side,
        "data-index": i}, box);
      e.textContent = String(text);
      e.addEventListener("click", function () {
        if (state.side === side && state.sel === i) { state.side = null; state.sel = null; }
        else { state.side = side; state.sel = i; }
        draw();
      });
      return e;
    }
    queries.forEach(function (tok, i) { left.push(label(colW - 6, 14 + i * rowH, tok, "end", "q", i)); });
    keys.forEach(function (tok, j) { right.push(label(colW + gap + 6, 14 + j * rowH, tok, "start", "k", j)); });

    function draw() {
      while (lines.firstChild) lines.removeChild(lines.firstChild);
      var a = data.attn[state.li][state.hi];
      var count = 0;
      for (var i = 0; i < a.length; i++) {
        if (state.side === "q" && state.sel !== i) continue;
        for (var j = 0; j < a[i].length; j++) {
          if (state.side === "k" && state.sel !== j) continue;
          var w = a[i][j];
          if (w < MIN_WEIGHT) continue;
          svg("line", {x1: colW, y1: 10 + i * rowH, x2: colW + gap, y2: 10 + j * rowH,
            "stroke-width": (0.5 + 5 * w).toFixed(2), "stroke-opacity": Math.min(1, 0.15 + w).toFixed(2),
            "class": "phv-line"}, lines);
          count++;
        }
      }
      left.forEach(function (e, i) { e.setAttribute("class", "phv-tok" + (state.side === "q" && state.sel === i ? " phv-on" : "")); });
      right.forEach(function (e, j) { e.setAttribute("class", "phv-tok" + (state.side === "k" && state.sel === j ? " phv-on" : "")); });
      root.setAttribute("data-layer", String(data.layers[state.li]));
      root.setAttribute("data-head", String(data.heads[state.hi]));
      root.setAttribute("data-selected", state.sel === null ? "" : state.side + state.sel);
      root.setAttribute("data-lines", String(count));
    }
    draw();
  }

  function mountAll() {
    var roots = document.querySelectorAll("[data-probe-head-view]");
    for (var r = 0; r < roots.length; r++) {
      var root = roots[r];
      if (root.getAttribute("data-mounted")) continue;
      var src = root.querySelector("script[type='application/json']");
      if (!src) continue;
      mount(root, JSON.parse(src.textContent));
    }
  }

  window.ProbeHeadView = {mount: mount, mountAll: mountAll};
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", mountAll);
  else mountAll();
})();
