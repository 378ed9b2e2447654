/**
 * JupyterLab 4 plugin: highlights the autocomp DSL.
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

import { autocompCellHighlighter } from './highlight';
import { autocompLanguageSupport } from './language';

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

export default plugin;
