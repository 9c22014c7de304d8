/* The policy form's limits: when a limit's kind changes, show that kind's settings in
   its words and hide the others. What each kind shows and calls its settings comes
   from the server (limits/admin/limit_form.py, on the kind's select); a hidden
   setting is reset on save, so a value left in it does no harm. */
'use strict';
{
    const OTHER_KIND = 'data-sluice-other-kind';

    function follow(select) {
        const data = JSON.parse(select.dataset.sluiceKinds);
        const words = data.kinds[select.value] || {};
        const prefix = select.id.slice(0, -'kind'.length);  // "id_limits-0-"
        for (const name of data.fields) {
            const input = document.getElementById(prefix + name);
            if (!input) {
                continue;
            }
            if (!(name in words)) {
                input.setAttribute(OTHER_KIND, '');
                continue;
            }
            input.removeAttribute(OTHER_KIND);
            const [label, help] = words[name];
            const tag = document.querySelector(`label[for="${input.id}"]`);
            if (tag) {
                tag.textContent = `${label}:`;
            }
            const helpText = document.getElementById(`${input.id}_helptext`);
            if (helpText) {
                helpText.firstElementChild.textContent = help;
            }
        }
    }

    document.addEventListener('change', (event) => {
        if (event.target.matches('select[data-sluice-kinds]')) {
            follow(event.target);
        }
    });
}
