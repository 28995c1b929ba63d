// The course's JupyterLab extension: .cu and .cuh files open in Lab's editor as "CUDA", highlighted with C++'s
// grammar (Lab's language registry knows C++ by cpp, cc, hpp, ... but not cu). harness/lab.py installs it into the
// environment's share/jupyter/labextensions/ when ./course lab starts.
//
// Written by hand, so that no Node or webpack build is needed: it is the module-federation container that
// JupyterLab 4's loader expects of a prebuilt extension (jupyterlab/staging/bootstrap.js loads the script named by
// package.json's jupyterlab._build.load, then calls window._JUPYTERLAB[name].init(shareScope); index.js calls
// .get("./extension") and the factory it resolves to, and registers the plugins of the module's `default`).
// The registry's token is taken from @jupyterlab/codemirror as Lab shares it, the same object Lab's own plugins use.
var _JUPYTERLAB;
(function () {
  "use strict";
  var NAME = "gpu-course-cuda";
  var scope = null;

  // The version a webpack singleton consumer takes: one already loaded, else the highest.
  function newer(a, b) {
    var x = a.split(/[.+-]/), y = b.split(/[.+-]/);
    for (var i = 0; i < Math.max(x.length, y.length); i++) {
      var p = parseInt(x[i], 10), q = parseInt(y[i], 10);
      if (isNaN(p) || isNaN(q)) { if ((x[i] || "") !== (y[i] || "")) return (y[i] || "") > (x[i] || ""); continue; }
      if (p !== q) return q > p;
    }
    return false;
  }
  function shared(pkg) {
    var versions = scope && scope[pkg];
    var keys = versions ? Object.keys(versions) : [];
    if (!keys.length) return Promise.reject(new Error(NAME + ": this JupyterLab shares no " + pkg));
    var key = keys.reduce(function (a, b) { return !a || (!versions[a].loaded && newer(a, b)) ? b : a; }, "");
    var entry = versions[key];
    return Promise.resolve(entry.lib || entry.get()).then(function (factory) { return factory(); });
  }

  function plugin(codemirror) {
    return {
      id: NAME + ":languages",
      description: "Open .cu and .cuh files as CUDA, highlighted as C++.",
      autoStart: true,
      requires: [codemirror.IEditorLanguageRegistry],
      activate: function (app, languages) {
        var cpp = languages.findByName("C++") || languages.findByMIME("text/x-c++src");
        if (!cpp) {
          console.warn(NAME + ": Lab has no C++ language; .cu files stay plain text");
          return;
        }
        if (!languages.findByName("CUDA") && !languages.findByMIME("text/x-cuda")) {
          languages.addLanguage({
            name: "CUDA", displayName: "CUDA C++", mime: "text/x-cuda", extensions: ["cu", "cuh"],
            load: function () { return cpp.load(); }  // C++'s grammar (loaded once, shared with C++ files)
          });
        }
        if (app.docRegistry && !app.docRegistry.getFileType("cuda")) {
          app.docRegistry.addFileType({
            name: "cuda", displayName: "CUDA File", extensions: [".cu", ".cuh"], mimeTypes: ["text/x-cuda"],
            contentType: "file", fileFormat: "text"
          });
        }
      }
    };
  }

  var modules = {
    "./extension": function () {
      return shared("@jupyterlab/codemirror").then(function (codemirror) {
        return function () { return { __esModule: true, default: [plugin(codemirror)] }; };
      });
    }
  };

  _JUPYTERLAB = _JUPYTERLAB === undefined ? {} : _JUPYTERLAB;
  _JUPYTERLAB[NAME] = {
    init: function (shareScope) {
      if (scope && scope !== shareScope) throw new Error(NAME + ": already initialised with another share scope");
      scope = shareScope;
    },
    get: function (module) {
      return Object.prototype.hasOwnProperty.call(modules, module)
        ? modules[module]()
        : Promise.reject(new Error('Module "' + module + '" does not exist in container ' + NAME + "."));
    }
  };
})();
