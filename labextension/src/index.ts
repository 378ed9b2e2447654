/**
 * JupyterLab 4 plugins: the autocomp result view (view.ts) and DSL highlighting.
 *
 * Result view: `application/vnd.autocomp.view+json` outputs render the live
 * widget when its model exists and the static HTML beside it otherwise. The
 * renderer is added to every notebook's own rendermime registry, so it reaches
 * that notebook's ipywidgets manager; elsewhere (the app's registry) it shows
 * the static HTML.
 *
 * Highlighting:
 *
 * - In notebook cells (and consoles) whose first line is `%%autocomp`: the
 *   cell's language stays the kernel's (Python), so instead of a language we
 *   add an editor extension that marks DSL tokens with `cm-autocomp-<type>`
 *   classes (style/base.css colours them with the theme's editor colours).
 * - In `.acir` files: an `autocomp` language (mime `text/x-autocomp`) built
 *   with StreamLanguage on the same tokenizer, so the file editor highlights
 *   through the normal CodeMirror highlight tags.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  EditorExtensionRegistry,
  IEditorExtensionRegistry,
  IEditorLanguageRegistry
} from '@jupyterlab/codemirror';

import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';

import { autocompCellHighlighter } from './highlight';
import { autocompLanguageSupport } from './language';
import { VIEW_RANK, viewRendererFactory } from './view';

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'autocomp-jupyter-labextension:plugin',
  description: 'Syntax highlighting for %%autocomp cells and .acir files.',
  autoStart: true,
  requires: [IEditorExtensionRegistry, IEditorLanguageRegistry],
  activate: (
    app: JupyterFrontEnd,
    extensions: IEditorExtensionRegistry,
    languages: IEditorLanguageRegistry
  ) => {
    extensions.addExtension({
      name: 'autocomp-jupyter:highlight',
      factory: () =>
        EditorExtensionRegistry.createImmutableExtension(
          autocompCellHighlighter()
        )
    });
    languages.addLanguage({
      name: 'autocomp',
      displayName: 'autocomp tensor IR',
      mime: 'text/x-autocomp',
      extensions: ['acir'],
      load: async () => autocompLanguageSupport()
    });
  }
};

const viewPlugin: JupyterFrontEndPlugin<void> = {
  id: 'autocomp-jupyter-labextension:view',
  description: 'The autocomp result view: live widget, or its static HTML when the widget model is gone.',
  autoStart: true,
  requires: [IRenderMimeRegistry],
  optional: [INotebookTracker],
  activate: (
    app: JupyterFrontEnd,
    rendermime: IRenderMimeRegistry,
    notebooks: INotebookTracker | null
  ) => {
    rendermime.addFactory(viewRendererFactory(rendermime), VIEW_RANK);
    if (notebooks) {
      const bind = (panel: NotebookPanel) => {
        const registry = panel.content.rendermime;
        registry.addFactory(viewRendererFactory(registry, panel), VIEW_RANK);
      };
      notebooks.forEach(bind);
      notebooks.widgetAdded.connect((_, panel) => bind(panel));
    }
  }
};

export default [plugin, viewPlugin];
